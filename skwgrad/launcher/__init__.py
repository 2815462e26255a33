"""Run cached kernels: GPU backends (``backends``), launch plans (``plan``), kernel selection
(``select``), launch options (``options``), array interop (``interop``), how arrays are read
(``layout``), the per-call path (``calls``), workspace arenas (``workspace``), the Python API (``api``: ``skwgrad.wgrad`` /
``skwgrad.plan``) and ``skwgrad run-from-cache`` (``commands``). Nothing here compiles, and
nothing imports a GPU runtime until a backend is asked for."""
