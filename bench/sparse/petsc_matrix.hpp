// What the PETSc anchors of bench/sparse share: the error check, an MPIAIJ matrix assembled from
// this rank's rows in local CSR form with global column indices, the 5-point Poisson row both
// libraries are given, and index vectors as tensors.
#pragma once

#include <ATen/ATen.h>
#include <petscmat.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace einshard_bench {

inline void petsc_check(PetscErrorCode code, const char* what) {
  if (code != 0) throw std::runtime_error(std::string("PETSc call failed: ") + what);
}

/// Rows [first, first + rowptr.size() - 1) of an m x n matrix with `nloc` owned columns; at most
/// `d_nz` entries per row in the diagonal block and `o_nz` outside it (preallocation).
inline Mat petsc_matrix(const std::vector<std::int64_t>& rowptr, const std::vector<std::int64_t>& col,
                        const std::vector<double>& val, std::int64_t first, std::int64_t nloc, std::int64_t m,
                        std::int64_t n, PetscInt d_nz, PetscInt o_nz) {
  const auto mloc = static_cast<std::int64_t>(rowptr.size()) - 1;
  Mat A = nullptr;
  petsc_check(MatCreate(PETSC_COMM_WORLD, &A), "MatCreate");
  petsc_check(MatSetSizes(A, static_cast<PetscInt>(mloc), static_cast<PetscInt>(nloc), static_cast<PetscInt>(m),
                          static_cast<PetscInt>(n)),
              "MatSetSizes");
  petsc_check(MatSetType(A, MATAIJ), "MatSetType");
  petsc_check(MatSeqAIJSetPreallocation(A, d_nz, nullptr), "MatSeqAIJSetPreallocation");
  petsc_check(MatMPIAIJSetPreallocation(A, d_nz, nullptr, o_nz, nullptr), "MatMPIAIJSetPreallocation");
  std::vector<PetscInt> cols;
  for (std::int64_t i = 0; i < mloc; ++i) {
    const auto begin = rowptr[static_cast<std::size_t>(i)], end = rowptr[static_cast<std::size_t>(i) + 1];
    cols.assign(col.begin() + begin, col.begin() + end);
    const auto row = static_cast<PetscInt>(first + i);
    petsc_check(MatSetValues(A, 1, &row, static_cast<PetscInt>(end - begin), cols.data(), val.data() + begin,
                             INSERT_VALUES),
                "MatSetValues");
  }
  petsc_check(MatAssemblyBegin(A, MAT_FINAL_ASSEMBLY), "MatAssemblyBegin");
  petsc_check(MatAssemblyEnd(A, MAT_FINAL_ASSEMBLY), "MatAssemblyEnd");
  return A;
}

/// Row i of the 5-point Poisson matrix on a g × g grid (Dirichlet): add(column, value) per
/// entry, in ascending column order, as PETSc's MatSetValues likes it.
template <class Add>
void poisson_row(std::int64_t g, std::int64_t i, Add&& add) {
  const auto x = i % g, y = i / g;
  if (y > 0) add(i - g, -1.0);
  if (x > 0) add(i - 1, -1.0);
  add(i, 4.0);
  if (x + 1 < g) add(i + 1, -1.0);
  if (y + 1 < g) add(i + g, -1.0);
}

inline at::Tensor as_tensor(const std::vector<std::int64_t>& v) {
  return at::from_blob(const_cast<std::int64_t*>(v.data()), {static_cast<std::int64_t>(v.size())}, at::kLong).clone();
}

}  // namespace einshard_bench
