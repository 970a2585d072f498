"""ctest packaging.spack: the Spack recipe compiles (py_compile), and, under a small stand-in for
the `spack.package` module (Spack itself is not installed here), it declares the variants metis,
fftw, hypre and nccl with their dependencies, and cmake_args turns each variant into its CMake
option.

usage: python3 check_spack_recipe.py <path to package.py>
"""

import importlib.util
import py_compile
import sys
import types

recipe = sys.argv[1]
py_compile.compile(recipe, doraise=True)

declared = {"variant": {}, "depends_on": [], "version": [], "conflicts": []}


def _record(kind):
    def directive(*args, **kwargs):
        if kind == "variant":
            declared["variant"][args[0]] = kwargs
        else:
            declared[kind].append((args, kwargs))

    return directive


class Spec:
    def __init__(self, variants):
        self.variants = variants

    def satisfies(self, constraint):
        return self.variants.get(constraint.lstrip("+~"), False) == constraint.startswith("+")

    def __getitem__(self, name):
        return types.SimpleNamespace(mpicxx="/stand-in/bin/mpicxx", prefix="/stand-in/" + name)


class CMakePackage:
    run_tests = False

    def define(self, name, value):
        if isinstance(value, bool):
            return "-D%s:BOOL=%s" % (name, "ON" if value else "OFF")
        return "-D%s=%s" % (name, value)

    def define_from_variant(self, name, variant):
        return self.define(name, self.spec.variants[variant])


package = types.ModuleType("spack.package")
package.CMakePackage = CMakePackage
for kind in ("variant", "depends_on", "version", "conflicts"):
    setattr(package, kind, _record(kind))
for name in ("license", "generator", "maintainers", "requires"):
    setattr(package, name, lambda *a, **k: None)
package.__all__ = [n for n in vars(package) if not n.startswith("_")]
spack = types.ModuleType("spack")
spack.package = package
sys.modules["spack"] = spack
sys.modules["spack.package"] = package

spec = importlib.util.spec_from_file_location("einshard_recipe", recipe)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)

failures = []
for v in ("metis", "fftw", "hypre", "nccl"):
    if v not in declared["variant"]:
        failures.append("variant %s is not declared" % v)
    when = ["when" in k and k["when"] == "+" + v for _, k in declared["depends_on"]]
    if not any(when):
        failures.append("variant %s adds no dependency (depends_on(..., when='+%s'))" % (v, v))
for dep in ("py-torch", "mpi", "cmake"):
    if not any(a[0].startswith(dep) for a, _ in declared["depends_on"]):
        failures.append("no depends_on(%r)" % dep)

options = {"metis": "EINSHARD_USE_METIS", "fftw": "EINSHARD_USE_FFTW", "hypre": "EINSHARD_USE_HYPRE",
           "nccl": "EINSHARD_USE_NCCL"}
for on in (True, False):
    pkg = module.Einshard()
    pkg.spec = Spec({"metis": on, "fftw": on, "hypre": on, "nccl": on, "explain": True})
    args = pkg.cmake_args()
    for v, option in options.items():
        want = "-D%s:BOOL=%s" % (option, "ON" if on else "OFF")
        if want not in args:
            failures.append("cmake_args with %s%s lacks %s: %s" % ("+" if on else "~", v, want, args))

if failures:
    sys.exit("spack recipe %s:\n  " % recipe + "\n  ".join(failures))
print("spack recipe %s: %d variants, %d dependencies, cmake_args ok" %
      (recipe, len(declared["variant"]), len(declared["depends_on"])))
