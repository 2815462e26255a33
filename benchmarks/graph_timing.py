"""Device time of a call, CUDA-graph replayed: the timer the JIT prototypes share (dw_vert_proto.py,
dram_probe.py). ``fn`` is captured ``reps`` times into one graph (host cost out of the picture), the
graph replayed ``replays`` times with device events around each, the first replay dropped;
``before_replay`` (e.g. an L2 flush) runs before each replay, outside the timed span."""

from __future__ import annotations

import statistics


def graph_time(torch, fn, reps: int = 20, replays: int = 7, before_replay=None) -> float:
    """Median microseconds per call of ``fn``."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        fn()
        torch.cuda.synchronize()
        with torch.cuda.graph(g, stream=s):
            for _ in range(reps):
                fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(replays):
        if before_replay is not None:
            before_replay()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) * 1000 / reps)
    return statistics.median(out[1:])
