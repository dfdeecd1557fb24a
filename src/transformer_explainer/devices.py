"""Where a model runs: a device named in Python or on the command line ("auto", "cpu", "cuda", "cuda:N",
"mps"), checked against this machine, and what each kind of device computes in.

A device that is not here is refused with one sentence that says what is (`InputError`), never with
torch's own error. "auto" takes the first CUDA GPU, else Apple's GPU (MPS), else the CPU.
"""

from __future__ import annotations

import torch

from .errors import InputError

DEVICE_NAMES = "auto, cpu, cuda, cuda:N (N: a GPU's number) or mps"
# weights and activations on a GPU may be in float16 too; the CPU computes in float32 or bfloat16
GPU_ONLY_DTYPES = (torch.float16,)


def _cuda_count() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _mps_available() -> bool:
    return bool(getattr(torch.backends, "mps", None)) and torch.backends.mps.is_available()


def resolve_device(spec: str | torch.device) -> torch.device:
    """The torch device for `spec`, present on this machine, with its index ("cuda" is cuda:0); an
    InputError in one sentence for a device that is not here or is no device at all."""
    if isinstance(spec, str) and spec.strip().lower() == "auto":
        if _cuda_count():
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("mps") if _mps_available() else torch.device("cpu")
    if isinstance(spec, torch.device):
        device = spec
    elif isinstance(spec, str):
        try:
            device = torch.device(spec.strip().lower())
        except RuntimeError:
            raise InputError(f"unknown device {spec!r}: use {DEVICE_NAMES}") from None
    else:
        raise InputError(f"a device is a name such as 'cpu' or 'cuda:0', got {type(spec).__name__}")
    name = str(spec)
    if device.type == "cpu":
        if device.index not in (None, 0):
            raise InputError(f"device {name!r}: the CPU has no number; use 'cpu'")
        return torch.device("cpu")
    if device.type == "cuda":
        n = _cuda_count()
        if n == 0:
            why = (f"this PyTorch ({torch.__version__}) is built without CUDA" if torch.version.cuda is None
                   else "PyTorch finds no CUDA GPU on this machine")
            raise InputError(f"device {name!r} is not available: {why}; use 'cpu' or 'auto'")
        index = torch.cuda.current_device() if device.index is None else device.index
        if not 0 <= index < n:
            gpus = ", ".join(f"cuda:{i}" for i in range(n))
            raise InputError(f"device {name!r} is not available: this machine has {n} CUDA GPU"
                             f"{'s' if n > 1 else ''} ({gpus})")
        return torch.device("cuda", index)
    if device.type == "mps":
        if not _mps_available():
            raise InputError(f"device {name!r} is not available: MPS needs a Mac with Apple silicon and a PyTorch "
                             f"built with MPS; use 'cpu' or 'auto'")
        return torch.device("mps")
    raise InputError(f"device {name!r} cannot run a model here: use {DEVICE_NAMES}")


def describe_device(device: torch.device) -> str:
    """The device as a reader wants it: "cpu", "cuda:0 (NVIDIA H200, 139.7 GiB)", "mps (Apple GPU)"."""
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return f"{device} ({props.name}, {props.total_memory / 2**30:.1f} GiB)"
    if device.type == "mps":
        return "mps (Apple GPU)"
    return str(device)


def check_dtype(dtype: torch.dtype, devices: set[torch.device]) -> None:
    """Refuse a dtype one of `devices` does not compute in (float16 on the CPU)."""
    if dtype in GPU_ONLY_DTYPES and any(d.type == "cpu" for d in devices):
        raise InputError(f"{str(dtype).removeprefix('torch.')} runs on a GPU only, and this model would run (in "
                         f"part) on the CPU; use bfloat16 or float32 there")


def float64_device(device: torch.device) -> torch.device:
    """Where float64 arithmetic on values from `device` is done: there, unless the device has no float64
    (Apple's GPU), then on the CPU. Analyses that add many small contributions (attribution, KL, the
    head roles' sums) compute in float64."""
    return torch.device("cpu") if device.type == "mps" else device


def free_memory(device: torch.device) -> int | None:
    """Bytes free on a GPU now (None for the CPU and for Apple's GPU, which shares the CPU's memory)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    return None
