"""A builder process with a fake compile step (tests): ``python _fake_builder.py CACHE LOG N SLEEP``.

Every compile appends "pid label arch" to LOG, so a test can count how often each kernel was
compiled across concurrent builders. Prints the build summary as JSON."""

import concurrent.futures as cf
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import skwgrad.aot.compile as compile_mod  # noqa: E402


def fake_compile(spec, arch, **kw):
    from _codeobj import fake_compiled  # a well-formed object whose metadata agrees with the spec

    with open(sys.argv[2], "a") as f:
        f.write(f"{os.getpid()} {spec.label} {arch}\n")
    time.sleep(float(sys.argv[4]))
    return fake_compiled(spec, arch)


def items(n):
    from skwgrad.aot.sweep import sweep

    return sweep("default", arches=["gfx942"], dtypes=["bf16"], tiles="64x64x64")[:n]


if __name__ == "__main__":
    compile_mod.compile_spec = fake_compile
    from skwgrad.aot.build import build
    from skwgrad.cache import Cache

    go = sys.argv[5] if len(sys.argv) > 5 else None
    while go and not os.path.exists(go):  # start line: both builders begin together
        time.sleep(0.005)
    with cf.ThreadPoolExecutor(2) as ex:
        s = build(items(int(sys.argv[3])), Cache(sys.argv[1]), executor=ex, progress=False, claim_poll=0.05)
    print(json.dumps(s.to_dict()))
