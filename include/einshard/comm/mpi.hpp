#pragma once
/// @file
/// MPI over torch dtypes: the datatype that moves a dtype's bytes, and a sum that is computed in
/// the dtype's own arithmetic (half and bfloat16 included), never on reinterpreted bytes.

#include <ATen/ATen.h>
#include <mpi.h>

#include <complex>
#include <cstdint>
#include <limits>
#include <string>

#include "einshard/comm/check.hpp"
#include "einshard/error.hpp"

namespace einshard::comm {

/// Owns a committed derived datatype.
class Datatype {
 public:
  Datatype() = default;
  explicit Datatype(MPI_Datatype t) : type_(t) { check(MPI_Type_commit(&type_), "MPI_Type_commit"); }
  Datatype(Datatype&& o) noexcept : type_(o.type_) { o.type_ = MPI_DATATYPE_NULL; }
  Datatype& operator=(Datatype&& o) noexcept {
    std::swap(type_, o.type_);
    return *this;
  }
  Datatype(const Datatype&) = delete;
  Datatype& operator=(const Datatype&) = delete;
  ~Datatype() {
    if (type_ != MPI_DATATYPE_NULL) MPI_Type_free(&type_);
  }
  [[nodiscard]] MPI_Datatype get() const noexcept { return type_; }

 private:
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
};

namespace detail {

template <class T>
void sum_in_dtype(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<const T*>(in);
  auto* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = static_cast<T>(a[i] + b[i]);
}

/// Datatypes and ops MPI does not predefine, created once per process and freed when MPI finalizes
/// (through a delete callback on MPI_COMM_SELF, which MPI_Finalize runs first).
struct CustomTypes {
  MPI_Datatype bytes2 = MPI_DATATYPE_NULL, bytes4 = MPI_DATATYPE_NULL;
  MPI_Op half_sum = MPI_OP_NULL, bfloat16_sum = MPI_OP_NULL, complex_half_sum = MPI_OP_NULL;

  static CustomTypes& get() {
    static CustomTypes* types = [] {
      auto* t = new CustomTypes;
      MPI_Type_contiguous(2, MPI_BYTE, &t->bytes2);
      MPI_Type_commit(&t->bytes2);
      MPI_Type_contiguous(4, MPI_BYTE, &t->bytes4);
      MPI_Type_commit(&t->bytes4);
      MPI_Op_create(&sum_in_dtype<c10::Half>, 1, &t->half_sum);
      MPI_Op_create(&sum_in_dtype<c10::BFloat16>, 1, &t->bfloat16_sum);
      MPI_Op_create(&sum_in_dtype<c10::complex<c10::Half>>, 1, &t->complex_half_sum);
      int key = MPI_KEYVAL_INVALID;
      MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, &release, &key, t);
      MPI_Comm_set_attr(MPI_COMM_SELF, key, t);
      return t;
    }();
    return *types;
  }

  static int release(MPI_Comm, int, void* value, void*) {
    auto* t = static_cast<CustomTypes*>(value);
    MPI_Type_free(&t->bytes2);
    MPI_Type_free(&t->bytes4);
    MPI_Op_free(&t->half_sum);
    MPI_Op_free(&t->bfloat16_sum);
    MPI_Op_free(&t->complex_half_sum);
    return MPI_SUCCESS;
  }
};

}  // namespace detail

/// The MPI datatype of one element of `dtype`.
inline MPI_Datatype datatype(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: return MPI_FLOAT;
    case at::kDouble: return MPI_DOUBLE;
    case at::kComplexFloat: return MPI_C_FLOAT_COMPLEX;
    case at::kComplexDouble: return MPI_C_DOUBLE_COMPLEX;
    case at::kLong: return MPI_INT64_T;
    case at::kInt: return MPI_INT32_T;
    case at::kShort: return MPI_INT16_T;
    case at::kChar: return MPI_INT8_T;
    case at::kByte: return MPI_UINT8_T;
    case at::kBool: return MPI_C_BOOL;
    case at::kHalf:
    case at::kBFloat16: return detail::CustomTypes::get().bytes2;
    case at::kComplexHalf: return detail::CustomTypes::get().bytes4;
    default:
      if (at::elementSize(dtype) == 1) return MPI_BYTE;  // float8 variants, uint bits: move only
      throw Error(std::string("MPI datatype: expected a dtype MPI can move, found ") + c10::toString(dtype));
  }
}

/// The MPI operation that sums two `dtype` values the way torch would (bool: logical or).
inline MPI_Op sum_op(at::ScalarType dtype) {
  switch (dtype) {
    case at::kHalf: return detail::CustomTypes::get().half_sum;
    case at::kBFloat16: return detail::CustomTypes::get().bfloat16_sum;
    case at::kComplexHalf: return detail::CustomTypes::get().complex_half_sum;
    case at::kBool: return MPI_LOR;
    case at::kFloat: case at::kDouble: case at::kComplexFloat: case at::kComplexDouble:
    case at::kLong: case at::kInt: case at::kShort: case at::kChar: case at::kByte:
      return MPI_SUM;
    default:
      throw Error(std::string("MPI sum: expected a dtype that can be summed across ranks, found ") +
                  c10::toString(dtype));
  }
}

/// MPI counts are `int`; refuse silently-truncated messages.
inline int count(std::int64_t n) {
  if (n < 0 || n > std::numeric_limits<int>::max())
    throw Error("MPI message: expected at most 2^31 - 1 elements (what one MPI call can move), found " +
                std::to_string(n));
  return static_cast<int>(n);
}

/// A communicator's handle as a plain integer (part of a cache key).
inline std::int64_t to_handle(MPI_Comm comm) { return static_cast<std::int64_t>(MPI_Comm_c2f(comm)); }

}  // namespace einshard::comm
