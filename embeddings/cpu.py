"""What this machine's CPU offers the encoder: its feature flags, and whether
it has native bf16 products. Below both encoders (``encoder``, ``bf16_model``),
which ask it and nothing of each other."""

from __future__ import annotations

BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_flags() -> list[str]:
    """The CPU's feature flags (``/proc/cpuinfo``: x86's ``flags``, Arm's
    ``Features``); none where it cannot be read."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return line.partition(":")[2].split()
    except OSError:
        pass
    return []


def cpu_has_bf16() -> bool:
    flags = cpu_flags()
    return any(flag in flags for flag in BF16_FLAGS)
