"""The verify-then-time step the interleaved GPU benchmark scripts share (gpu_tma_auto.py,
gpu_fused_ab.py, gpu_dw_window_ab.py): each distinct launch of ``entrants`` verified against the
float64 reference with dW and its scratch workspace poisoned first, the zeroed arena read back
clean, then timed in ``rounds`` interleaved rounds (median of ``iters`` event-timed launches
behind the stream ``hold``)."""

from __future__ import annotations

import statistics


def verify_and_time(p, entrants: dict, backend, bufs, ref, tol, hold, *, rounds: int, iters: int, verify_launches: int = 1):
    """(rows, plans): per entrant name its record (kernel, family, variant, pool, ks, padded,
    predicted_us, grid; rel_err, tol, zeroed_left_nonzero, ok; ``us`` when it verified, ``error``
    when it could not run); an entrant launching what another one does gets ``same_as`` and that
    one's record. ``verify_launches`` > 1 repeats the poisoned launch (a kernel that must leave its
    workspace ready for the next launch shows it)."""
    from skwgrad.reference import relative_error

    ident = lambda c: (c.kernel.key, c.pool, c.ks_count, c.padding is not None)  # noqa: E731
    uniq: dict = {}
    alias = {}
    for k, c in entrants.items():
        same = next((u for u, uc in uniq.items() if ident(uc) == ident(c)), None)
        if same is None:
            uniq[k] = c
        else:
            alias[k] = same
    rows, plans = {}, {}
    for k, c in uniq.items():
        rec = {"kernel": c.kernel.label, "family": c.spec.family, "variant": c.spec.variant, "pool": c.pool, "ks": c.ks_count,
               "padded": c.padding is not None, "predicted_us": c.predicted_us}  # fmt: skip
        try:
            pl = c.plan(p, backend)
            errs = []
            for _ in range(max(1, verify_launches)):
                pl.poison(dw=bufs.dw)
                pl.launch(bufs.dy, bufs.x, bufs.dw)
                errs.append(relative_error(bufs.read_dw(), ref))
            left = pl.zeroed_bytes_nonzero()
            rec.update(rel_err=max(errs), tol=tol, zeroed_left_nonzero=left, ok=bool(max(errs) <= tol and left == 0), grid=pl.grid)
            if rec["ok"]:
                plans[k] = pl
        except Exception as e:  # noqa: BLE001  (recorded: the row shows which launch could not run)
            rec["error"] = f"{type(e).__name__}: {e}"[:300]
        rows[k] = rec
    times = {k: [] for k in plans}
    order = list(plans)
    for i in range(rounds):
        for k in order[i % len(order) :] + order[: i % len(order)]:
            times[k].append(plans[k].time(bufs.dy, bufs.x, bufs.dw, warmup=2, iters=iters, hold=hold)["median_us"])
    for k, v in times.items():
        rows[k]["us"] = statistics.median(v)
    for k, same in alias.items():
        rows[k] = dict(rows[same], same_as=same)
    return rows, plans
