// What the FFT benchmarks share beyond ../common.hpp: how far einfft's result is from FFTW's.
#pragma once

#include <ATen/ATen.h>
#include <mpi.h>

namespace einshard_bench {

/// max |a - b| / max |b| over every rank's block: the error of a transform relative to its scale.
inline double max_rel_err(const at::Tensor& a, const at::Tensor& b) {
  double err = (a - b).abs().max().item<double>(), ref = b.abs().max().item<double>();
  MPI_Allreduce(MPI_IN_PLACE, &err, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &ref, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return err / ref;
}

}  // namespace einshard_bench
