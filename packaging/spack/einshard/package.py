# Spack package recipe for einshard. Use it from a local repository:
#   spack repo create myrepo && cp -r packaging/spack/einshard myrepo/packages/ && spack repo add myrepo
#   spack install einshard +metis +fftw ^openmpi
# Header-only: the install is the headers, the CMake package, einshard.pc, einshard-explain and
# the examples' sources.

from spack.package import *


class Einshard(CMakePackage):
    """Einsum-style sharding notation and distributed sparse linear algebra over LibTorch
    tensors and MPI (a header-only C++20 library)."""

    # The project has no public repository yet: point `git` at yours, or build a checkout in
    # place with `spack develop --path <checkout> einshard@main && spack install einshard`.
    homepage = "https://example.invalid/einshard"
    git = "https://example.invalid/einshard.git"

    license("BSD-3-Clause")

    version("main", branch="main")
    version("0.1.0", tag="v0.1.0")

    variant("metis", default=True, description="Graph partitioning with METIS (PartitionMethod::metis)")
    variant("fftw", default=True, description="FFTW 3 for einfft's local complex FFTs")
    # hypre and nccl bring their libraries into the environment for the parts that use them (the
    # AMG benchmarks' anchor; a GPU collective backend); their EINSHARD_USE_* options below are
    # passed now so the recipe need not change when the CMake side reads them.
    variant("hypre", default=False, description="hypre BoomerAMG, the anchor of the AMG benchmarks")
    variant("nccl", default=False, description="NCCL for GPU collectives (needs a CUDA LibTorch)")
    variant("explain", default=True, description="Build and install the einshard-explain tool")

    depends_on("cxx", type="build")
    depends_on("cmake@3.25:", type="build")
    depends_on("ninja", type="build")
    # LibTorch comes with py-torch (its share/cmake/Torch is on CMAKE_PREFIX_PATH).
    depends_on("py-torch@2:", type=("build", "link", "run"))
    depends_on("mpi")
    depends_on("metis@5:", when="+metis")
    depends_on("fftw@3: precision=float,double", when="+fftw")
    depends_on("hypre@2.26:", when="+hypre")
    depends_on("nccl", when="+nccl")
    depends_on("py-torch+cuda", when="+nccl")

    conflicts("%gcc@:11", msg="einshard needs C++20 (GCC 12 or newer)")
    conflicts("%clang@:13", msg="einshard needs C++20 (Clang 14 or newer)")

    generator("ninja")

    def cmake_args(self):
        return [
            self.define("EINSHARD_BUILD_TESTS", self.run_tests),
            self.define("EINSHARD_BUILD_BENCHMARKS", False),
            self.define("EINSHARD_BUILD_DOCS", False),
            self.define("EINSHARD_BUILD_EXAMPLES", True),
            self.define("EINSHARD_INSTALL", True),
            self.define_from_variant("EINSHARD_BUILD_TOOLS", "explain"),
            self.define_from_variant("EINSHARD_USE_METIS", "metis"),
            self.define_from_variant("EINSHARD_USE_FFTW", "fftw"),
            self.define_from_variant("EINSHARD_USE_HYPRE", "hypre"),
            self.define_from_variant("EINSHARD_USE_NCCL", "nccl"),
            self.define("EINSHARD_TORCH_CUDA_TOOLKIT", self.spec.satisfies("+nccl")),
            self.define("MPI_CXX_COMPILER", self.spec["mpi"].mpicxx),
        ]
