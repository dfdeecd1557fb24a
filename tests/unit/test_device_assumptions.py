"""No CPU assumption in the engine's source: every tensor the engine makes says where it lives, every random
generator says which device it draws on, and NumPy only ever receives tensors copied to the CPU.

`test_devices.py` runs the engine on a simulated second device and catches what a run reaches; this reads
every line, so that a path no test runs (a rarer option of an analysis) cannot make a CPU tensor beside a
GPU one either. A tensor meant for the CPU (an answer's table, the induction probe's ids, the same on every
machine) says `device="cpu"`. Weights made at construction (`nn.Parameter(torch.ones(n))`) are exempt: a
model is built under the loader's `torch.device` context, and placed afterwards.

The engine here is the decoder's: the package outside the server, the web app, and the seq2seq models and
training, which run on the CPU."""

from __future__ import annotations

import ast
from pathlib import Path

import transformer_explainer

PACKAGE = Path(transformer_explainer.__file__).parent
OUTSIDE = ("server", "seq2seq", "training", "web_dist", "builtin")

# torch's functions that make a tensor from nothing, on the default device unless told
FACTORIES = {"tensor", "as_tensor", "zeros", "ones", "empty", "full", "arange", "eye", "linspace", "logspace", "rand",
             "randn", "randint", "randperm", "empty_strided", "tril_indices", "triu_indices", "Generator"}


def engine_files() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p.relative_to(PACKAGE).parts[0] not in OUTSIDE)


def _is_torch_attr(node: ast.AST, names: set[str]) -> str | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch" \
            and node.attr in names:
        return node.attr
    return None


def _copied_to_cpu(node: ast.AST) -> bool:
    """`x.cpu()` or `x.to("cpu", ...)` / `x.to(device="cpu")`."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return False
    if node.func.attr == "cpu":
        return True
    if node.func.attr == "to":
        first = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "device"), None)
        return isinstance(first, ast.Constant) and first.value == "cpu"
    return False


def cpu_assumptions(source: str, filename: str = "<source>") -> list[str]:
    """`file:line: what` for each device-less tensor factory or generator, and each `.numpy()` of a tensor not
    copied to the CPU right there."""
    tree = ast.parse(source, filename)
    exempt: set[int] = set()  # ids of factory calls inside nn.Parameter(...) or `with torch.device(...)`
    for node in ast.walk(tree):
        in_parameter = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
            node.func.attr == "Parameter"
        in_device_block = isinstance(node, ast.With) and any(
            isinstance(i.context_expr, ast.Call) and _is_torch_attr(i.context_expr.func, {"device"})
            for i in node.items)
        if in_parameter or in_device_block:
            exempt.update(id(n) for n in ast.walk(node))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        factory = _is_torch_attr(node.func, FACTORIES)
        if factory and id(node) not in exempt and not any(k.arg == "device" for k in node.keywords):
            found.append(f"{filename}:{node.lineno}: torch.{factory}(...) without device=")
        if isinstance(node.func, ast.Attribute) and node.func.attr == "numpy" and not _copied_to_cpu(node.func.value):
            found.append(f"{filename}:{node.lineno}: .numpy() of a tensor not copied to the CPU (.cpu() first)")
    return found


def test_the_engine_makes_no_tensor_without_saying_where():
    found = [f for p in engine_files() for f in cpu_assumptions(p.read_text(encoding="utf-8"),
                                                                 str(p.relative_to(PACKAGE)))]
    assert found == []


def test_the_check_finds_each_kind_of_cpu_assumption():
    bad = """
import torch
def f(x):
    ids = torch.tensor([1, 2])
    mask = torch.zeros(3, dtype=torch.bool)
    g = torch.Generator()
    return x.detach().numpy(), x.float().numpy()
"""
    good = """
import torch
from torch import nn
def f(x):
    ids = torch.tensor([1, 2], device=x.device)
    table = torch.zeros(3, device="cpu")
    g = torch.Generator(device=x.device)
    w = nn.Parameter(torch.ones(3))
    with torch.device("meta"):
        m = torch.empty(5)
    return x.cpu().numpy(), x.to("cpu", torch.float32).numpy(), x.to(device="cpu").numpy()
"""
    assert [f.split(": ", 1)[1] for f in cpu_assumptions(bad)] == [
        "torch.tensor(...) without device=", "torch.zeros(...) without device=", "torch.Generator(...) without device=",
        ".numpy() of a tensor not copied to the CPU (.cpu() first)",
        ".numpy() of a tensor not copied to the CPU (.cpu() first)"]
    assert cpu_assumptions(good) == []
    assert len(engine_files()) > 30 and not any("server" in p.parts for p in engine_files())
