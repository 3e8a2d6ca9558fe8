// RUN: tpc-opt %s --tp-print-sharding-rules --mlir-print-op-on-diagnostic=false -o /dev/null 2>&1 | FileCheck %s

// Every factor is summed away: the global norm of sharded gradients is a
// partial sum over every split.
func.func @norm_squared(%g: tensor<16x32xf32>) {
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, j]) -> ([]) {i=16, j=32} reduction={i, j}
  %0 = tp.norm_squared %g : (tensor<16x32xf32>) -> tensor<f32>
  return
}
