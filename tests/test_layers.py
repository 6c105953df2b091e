"""The module map keeps itself true: every module is in docs/architecture.md with its layer,
no module imports a layer above its own, providers import only ep_host's top level and the
kernel library, and no private name crosses a package."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAP = ROOT / "docs" / "architecture.md"
LIBRARY = "ep_host.kernels"
ROW = re.compile(r"^\|\s*`(?P<path>[\w/.]+\.py)`\s*\|\s*(?P<layer>[\w ]+?)\s*\|"
                 r"\s*(?P<concept>.+?)\s*\|$")
DISTRIBUTIONS = ("ep_host", "plugins/cpu_ep/ep_host_cpu", "plugins/cuda_ep/ep_host_cuda")
SOURCES = (*DISTRIBUTIONS, "examples/third_party_ep/ep_host_example",
           "examples/onnxruntime_ep/ep_host_onnxruntime", "examples/openvino_ep/ep_host_openvino",
           "examples/nhwc_ep/ep_host_nhwc")


@dataclass(frozen=True)
class Import:
    module: str  # the module imported from (absolute)
    names: tuple[str, ...]  # the names taken from it (empty for ``import x``)
    line: int


def module_name(path: Path) -> str:
    """``ep_host/plan.py`` -> ``ep_host.plan``; a package's ``__init__.py`` is the package."""
    rel = path.relative_to(ROOT)
    parts = list(rel.with_suffix("").parts)
    if parts[0] in ("plugins", "examples"):
        parts = parts[2:]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def source_files() -> list[Path]:
    return sorted(p for base in SOURCES for p in (ROOT / base).rglob("*.py")
                  if "__pycache__" not in p.parts)


def documented_layers() -> dict[str, str]:
    """``module -> layer`` from the tables of docs/architecture.md."""
    layers = {}
    for line in MAP.read_text().splitlines():
        match = ROW.match(line.strip())
        if match:
            layers[module_name(ROOT / match["path"])] = match["layer"].strip()
    return layers


def imports_of(source: str, module: str, is_package: bool = False) -> list[Import]:
    """Every import a module makes when it runs (function bodies included; ``if TYPE_CHECKING``
    blocks left out), with relative imports made absolute."""
    tree = ast.parse(source)
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.extend(Import(a.name, (), node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.append(Import(base, tuple(a.name for a in node.names), node.lineno))
    return found


def targets(imp: Import, known: set[str]) -> list[str]:
    """The project modules an import loads: ``from ep_host import plan`` loads ``ep_host.plan``."""
    out = []
    if imp.module in known:
        out.append(imp.module)
    for name in imp.names:
        if f"{imp.module}.{name}" in known:
            out.append(f"{imp.module}.{name}")
    return out


def package_of(module: str) -> str:
    """The package a module belongs to for privacy: the kernel library, the host, a provider."""
    if module == LIBRARY or module.startswith(LIBRARY + "."):
        return LIBRARY
    return module.split(".")[0]


def faults(modules: dict[str, tuple[str, list[Import]]], layers: dict[str, str]) -> list[str]:
    """What breaks the rules, one line each (``modules``: name -> (layer, imports))."""
    known = set(modules)
    ours = {m.split(".")[0] for m in known}
    out = []
    for name, (layer, imports) in sorted(modules.items()):
        for imp in imports:
            where = f"{name}:{imp.line}"
            private = [n for n in imp.names if n.startswith("_") and not n.startswith("__")]
            if (private and imp.module.split(".")[0] in ours
                    and package_of(imp.module) != package_of(name)):
                out.append(f"{where}: private name {', '.join(private)} of {imp.module} "
                           "crosses a package")
            for target in targets(imp, known):
                if target == name:
                    continue
                if layer.isdigit():  # a host module
                    target_layer = layers.get(target, "")
                    if not target_layer.isdigit():
                        out.append(f"{where}: the host imports {target} ({target_layer})")
                    elif int(target_layer) > int(layer):
                        out.append(f"{where}: layer {layer} imports {target} of layer "
                                   f"{target_layer}")
                elif layer == "library":
                    if target != "ep_host" and package_of(target) != LIBRARY:
                        out.append(f"{where}: the kernel library imports {target}; it may import "
                                   "ep_host's top level and itself")
                elif layer == "provider":
                    own = name.split(".")[0]
                    if (target.split(".")[0] != own and target != "ep_host"
                            and package_of(target) != LIBRARY):
                        out.append(f"{where}: provider module imports {target}; providers import "
                                   "ep_host's top level, ep_host.kernels and their own package")
    return sorted(set(out))


def project_modules() -> dict[str, tuple[str, list[Import]]]:
    layers = documented_layers()
    out = {}
    for path in source_files():
        name = module_name(path)
        out[name] = (layers.get(name, "?"), imports_of(path.read_text(), name,
                                                        path.name == "__init__.py"))
    return out


def test_every_module_is_on_the_map_and_every_entry_exists():
    layers = documented_layers()
    modules = {module_name(p) for p in source_files()}
    missing = sorted(modules - set(layers))
    stale = sorted(set(layers) - modules)
    assert not missing, f"docs/architecture.md lacks {', '.join(missing)}"
    assert not stale, f"docs/architecture.md lists modules that do not exist: {', '.join(stale)}"
    for name, layer in layers.items():
        assert layer.isdigit() or layer in ("library", "provider"), f"{name}: layer {layer!r}"


def test_no_module_imports_upward_and_no_private_name_crosses_a_package():
    assert faults(project_modules(), documented_layers()) == []


def test_no_host_module_is_over_about_700_lines():
    layers = documented_layers()
    long = {p.name: n for p in source_files()
            if layers.get(module_name(p), "").isdigit()
            and (n := len(p.read_text().splitlines())) > 720}
    assert long == {}


@pytest.mark.parametrize("package", DISTRIBUTIONS)
def test_every_distribution_ships_type_information(package):
    assert (ROOT / package / "py.typed").is_file()
    pyproject = ROOT / Path(package).parent / "pyproject.toml"
    assert "py.typed" in pyproject.read_text()


# -- the checker itself catches what it must ---------------------------------------------------


def _modules(**sources: tuple[str, str]) -> dict[str, tuple[str, list[Import]]]:
    return {name: (layer, imports_of(src, name)) for name, (layer, src) in sources.items()}


LAYERS = {"ep_host": "2", "ep_host.errors": "1", "ep_host.session": "4",
          "ep_host.kernels": "library", "ep_host.kernels.conv": "library",
          "ep_host_cpu.provider": "provider", "ep_host_cuda.provider": "provider"}


def test_the_checker_reports_an_upward_import():
    modules = _modules(**{"ep_host.errors": ("1", "from ep_host.session import X\n"),
                          "ep_host.session": ("4", "from ep_host.errors import E\n")})
    assert faults(modules, LAYERS) == [
        "ep_host.errors:1: layer 1 imports ep_host.session of layer 4"]


def test_the_checker_reports_a_lazy_upward_import_but_not_a_type_checking_one():
    src = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
           "    from ep_host.session import S\n"
           "def f():\n    from ep_host import session\n")
    modules = _modules(**{"ep_host.errors": ("1", src), "ep_host.session": ("4", "")})
    assert faults(modules, LAYERS) == [
        "ep_host.errors:5: layer 1 imports ep_host.session of layer 4"]


def test_the_checker_keeps_providers_to_the_public_surface():
    modules = _modules(**{
        "ep_host_cuda.provider": ("provider", "from ep_host.session import S\n"
                                              "from ep_host_cpu.provider import work\n"
                                              "from ep_host.kernels.conv import _tap\n"
                                              "from ep_host.kernels import check_node\n"
                                              "from ep_host import Cost\n"),
        "ep_host_cpu.provider": ("provider", ""), "ep_host.session": ("4", ""),
        "ep_host.kernels": ("library", ""), "ep_host.kernels.conv": ("library", ""),
        "ep_host": ("2", "")})
    assert faults(modules, LAYERS) == [
        "ep_host_cuda.provider:1: provider module imports ep_host.session; providers import "
        "ep_host's top level, ep_host.kernels and their own package",
        "ep_host_cuda.provider:2: provider module imports ep_host_cpu.provider; providers import "
        "ep_host's top level, ep_host.kernels and their own package",
        "ep_host_cuda.provider:3: private name _tap of ep_host.kernels.conv crosses a package",
    ]


def test_the_checker_keeps_the_host_off_the_kernel_library():
    modules = _modules(**{"ep_host.session": ("4", "from ep_host.kernels import REGISTRY\n"),
                          "ep_host.kernels": ("library", "")})
    assert faults(modules, LAYERS) == [
        "ep_host.session:1: the host imports ep_host.kernels (library)"]
