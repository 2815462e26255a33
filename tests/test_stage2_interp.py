"""The Stage-2 reduce through the Triton interpreter: replica counts around its unroll
(``abi.spec.STAGE2_UNROLL`` replicas per step), a dW that ends inside a CTA, the reset of the
workspace replica; the sum must equal the replicas added one by one in replica order, bit for bit
(two-stage split-K is deterministic because of that order)."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from skwgrad.abi.spec import STAGE2_UNROLL

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np, torch
    from skwgrad.abi.launch import STAGE2_BLOCK
    from skwgrad.aot.kernels import stage2
    out = []
    for replicas, numel, reset, dt in json.loads(sys.stdin.read()):
        rng = np.random.default_rng(replicas * 1000 + numel)
        ws = torch.tensor(rng.standard_normal((replicas, numel)) * 10.0 ** rng.integers(-3, 4, (replicas, numel)), dtype=torch.float32)
        pad = torch.full((STAGE2_BLOCK,), float("nan"))  # past the last replica: must never be read
        buf = torch.cat([ws.reshape(-1), pad])
        dw = torch.full((numel,), float("nan"), dtype=getattr(torch, dt))
        grid = (-(-numel // STAGE2_BLOCK),)
        stage2.stage2_reduce[grid](buf, dw, numel, replicas, reset, BLOCK=STAGE2_BLOCK, UNROLL=stage2.STAGE2_UNROLL, GDC_WAIT=False)
        ref = torch.zeros(numel, dtype=torch.float32)
        for r in range(replicas):
            ref = ref + ws[r]
        out.append({"equal": bool(torch.equal(dw, ref.to(dw.dtype))), "zeroed": bool((buf[: replicas * numel] == 0).all()),
                    "untouched": bool(buf[replicas * numel :].isnan().all())})
    print(json.dumps(out))
    """
)


@pytest.mark.parametrize("dt", ["float32", "float16"])  # (the interpreter does not round to bf16 as the GPU does)
def test_stage2_sums_in_replica_order_for_counts_around_its_unroll(dt):
    u = STAGE2_UNROLL
    cases = [(r, n, 0, dt) for r in (1, u - 1, u, u + 1, 2 * u + 3) for n in (1, 700)] + [(1, 700, 1, dt)]
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(Path(__file__).parents[1]))
    import json

    proc = subprocess.run([sys.executable, "-c", SCRIPT], input=json.dumps(cases), capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(res) == len(cases)
    for (replicas, numel, reset, _), r in zip(cases, res):
        assert r["equal"], (replicas, numel)
        assert r["untouched"], (replicas, numel)  # no load or store past the last replica
        assert r["zeroed"] == bool(reset), (replicas, numel, reset)  # reset zeroes exactly what it read
