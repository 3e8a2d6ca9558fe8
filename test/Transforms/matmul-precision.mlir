// tp-matmul-precision sets every matrix product's operand precision; the
// plan records it per step, and the loader checks it.
// RUN: tpc-opt %s --tp-matmul-precision=precision=bf16 | FileCheck %s --check-prefix=BF16
// RUN: tpc-opt %s --tp-matmul-precision=precision=tf32 | FileCheck %s --check-prefix=TF32
// RUN: tpc-opt %s --tp-matmul-precision=precision=bf16 | tpc-opt --tp-matmul-precision=precision=f32 | FileCheck %s --check-prefix=F32
// RUN: not tpc-opt %s --tp-matmul-precision=precision=f16 2>&1 | FileCheck %s --check-prefix=BAD

// BF16-LABEL: func.func @products
// BF16: tp.matmul %{{.*}}, %{{.*}} {precision = bf16} : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
// BF16: tp.matmul %{{.*}}, %{{.*}} {precision = bf16, transpose_rhs} : (tensor<4x16xf32>, tensor<8x16xf32>) -> tensor<4x8xf32>
// TF32: tp.matmul %{{.*}}, %{{.*}} {precision = tf32}
// TF32: tp.matmul %{{.*}}, %{{.*}} {precision = tf32, transpose_rhs}
// F32-NOT: precision
// BAD: for the --precision option: Cannot find option named 'f16'!
func.func @products(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>) -> tensor<4x8xf32> {
  %0 = tp.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %1 = tp.matmul %0, %w {transpose_rhs} : (tensor<4x16xf32>, tensor<8x16xf32>) -> tensor<4x8xf32>
  return %1 : tensor<4x8xf32>
}

