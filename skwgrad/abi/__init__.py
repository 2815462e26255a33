"""The host-side contract: problem geometry, stream-K partition, kernarg ABI, workspace layout.

Everything that the kernels, the AOT sweep and the launcher must agree on is computed here and
nowhere else.
"""
