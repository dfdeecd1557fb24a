"""A second device for tests on a machine with only a CPU: tensors that say they live on `SIM` (torch's
"lazy" device, which every build knows by name) and hold real CPU numbers underneath, so the engine runs
end to end with real values, and every operation checks its tensors' devices the way a GPU kernel does.

Under `simulated_device()`, an operation that mixes a `SIM` tensor with a CPU tensor of one or more
dimensions raises `DeviceMismatch` (as CUDA raises "Expected all tensors to be on the same device"); a
0-dimensional CPU tensor is accepted as a scalar and CPU index tensors in indexing, as CUDA accepts them;
`.numpy()` of a `SIM` tensor fails, as it fails for a CUDA tensor; `.cpu()` and `.to(...)` move values
across, and factory functions given `device=SIM` make `SIM` tensors. The values are computed by the CPU
kernels on the held tensors, so a result on `SIM` equals the CPU result exactly.

What it cannot simulate: a `torch.Generator` on the device (torch makes none for "lazy"), and whatever
a real GPU computes differently (kernels, rounding): `benchmarks/gpu_check.py` checks that on a GPU.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

SIM = torch.device("lazy", 0)

# indexing ops, whose index tensors may stay on the CPU on a GPU too (torch moves them)
_INDEX_OPS = {"index.Tensor", "index_put.default", "index_put_.default", "_index_put_impl_.default"}


class DeviceMismatch(RuntimeError):
    """An operation got tensors on two devices, which a GPU kernel refuses."""


class SimTensor(torch.Tensor):
    """A tensor on `SIM` holding a CPU tensor `elem` with the values."""

    elem: torch.Tensor
    __slots__ = ["elem"]

    @staticmethod
    def __new__(cls, elem: torch.Tensor) -> SimTensor:
        assert elem.device.type == "cpu" and not isinstance(elem, SimTensor)
        r = torch.Tensor._make_wrapper_subclass(cls, elem.size(), strides=elem.stride(),
                                                storage_offset=elem.storage_offset(), dtype=elem.dtype,
                                                layout=elem.layout, device=SIM, requires_grad=False)
        r.elem = elem
        return r

    def __repr__(self) -> str:  # type: ignore[override]
        return f"SimTensor({self.elem!r})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):  # pragma: no cover - the mode handles it
        with SimulatedDevice():
            return func(*args, **(kwargs or {}))


def _is_sim(device: Any) -> bool:
    return device is not None and torch.device(device) == SIM


class SimulatedDevice(TorchDispatchMode):
    """Runs every operation on the CPU tensors held, after the device checks a GPU kernel makes."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        name = f"{func._opname}.{func._overloadname}"
        flat, _ = tree_flatten((args, kwargs))
        tensors = [t for t in flat if isinstance(t, torch.Tensor)]
        on_sim = any(isinstance(t, SimTensor) for t in tensors)
        # a conversion (`.to`, `.cpu()`; `aten.to` itself for inference tensors) or a copy moves values across devices
        moving = name == "_to_copy.default" or name.startswith("to.") or name == "copy_.default"
        if on_sim and not moving:
            for t in tensors:
                if isinstance(t, SimTensor) or t.dim() == 0 or (name in _INDEX_OPS and t.dtype in (
                        torch.int64, torch.int32, torch.bool)):
                    continue
                raise DeviceMismatch(f"Expected all tensors to be on the same device, but found at least two "
                                     f"devices, {SIM} and {t.device}! (in {name})")
        args = list(args)
        if name == "to.device":
            target = args[1]
        elif name == "to.other":
            target = args[1].device
        else:
            target = kwargs.get("device")
        to_sim = _is_sim(target)
        if to_sim:
            if name == "to.device":
                args[1] = torch.device("cpu")
            elif "device" in kwargs:
                kwargs["device"] = torch.device("cpu")
        elif moving and name != "copy_.default" and target is None:
            to_sim = isinstance(args[0], SimTensor)  # a dtype change keeps the device

        def unwrap(x: Any) -> Any:
            return x.elem if isinstance(x, SimTensor) else x

        out = func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs))
        if name == "_local_scalar_dense.default":
            return out
        wrap_results = (on_sim and not moving) or to_sim or (name == "copy_.default" and isinstance(args[0], SimTensor))
        if not wrap_results:
            return out
        first = func._schema.arguments[0] if func._schema.arguments else None
        if first is not None and first.alias_info is not None and first.alias_info.is_write:
            return args[0]  # an in-place operation returns its own input (its values changed underneath)
        # a view wraps a view of the held tensor, so that writes through either reach the same values; it is an
        # inference tensor exactly when its base is one, as torch's own views are
        view = bool(func._schema.returns) and func._schema.returns[0].alias_info is not None
        inference = args[0].is_inference() if view and isinstance(args[0], torch.Tensor) else None
        with torch.inference_mode(inference) if inference is not None else contextlib.nullcontext():
            return tree_map(lambda x: SimTensor(x) if isinstance(x, torch.Tensor) and not isinstance(x, SimTensor)
                            else x, out)


class _TensorFromData(TorchFunctionMode):
    """What the dispatcher does not see: `torch.tensor(data, device=SIM)` (torch builds it below the
    dispatcher), and `.tolist()` of a `SIM` tensor, which torch refuses for subclasses but a GPU answers."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func in (torch.tensor, torch.as_tensor) and _is_sim(kwargs.get("device")):
            kwargs["device"] = torch.device("cpu")
            return func(*args, **kwargs).to(SIM)
        if func is torch.Tensor.tolist and isinstance(args[0], SimTensor):
            return args[0].elem.tolist()
        if func in (torch.Tensor.__getitem__, torch.Tensor.__setitem__) and isinstance(args[0], SimTensor):
            args = (args[0], _cpu_index(args[1]), *args[2:])  # torch makes a list's index tensor below the dispatcher
        return func(*args, **kwargs)


def _cpu_index(index: Any) -> Any:
    """An index with each list of ints as a CPU index tensor (what torch makes of it on a real GPU)."""
    if isinstance(index, list):
        return torch.tensor(index)
    if isinstance(index, tuple):
        return tuple(_cpu_index(i) for i in index)
    return index


@contextmanager
def simulated_device() -> Iterator[torch.device]:
    """Within this block, `SIM` behaves as a device of its own (see the module's docstring)."""
    with _TensorFromData(), SimulatedDevice():
        yield SIM


def on_sim(t: torch.Tensor) -> bool:
    """Whether `t` lives on the simulated device (with values)."""
    return isinstance(t, SimTensor) and t.device == SIM
