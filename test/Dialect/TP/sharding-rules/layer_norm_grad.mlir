// RUN: tpc-opt %s --tp-print-sharding-rules --mlir-print-op-on-diagnostic=false -o /dev/null 2>&1 | FileCheck %s

// gamma_grad and beta_grad sum over tokens, so token factors are reductions
// for them while input_grad stays complete.
func.func @layer_norm_grad(%dy: tensor<2x8x16xf32>, %x: tensor<2x8x16xf32>, %g: tensor<16xf32>) {
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, j, k], [i, j, k], [k]) -> ([i, j, k], [k], [k]) {i=2, j=8, k=16} reduction={i, j} stats={k}
  %0:3 = tp.layer_norm_grad %dy, %x, %g : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<16xf32>) -> (tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>)
  return
}
