// RUN: tpc-opt %s --tp-print-sharding-rules --mlir-print-op-on-diagnostic=false -o /dev/null 2>&1 | FileCheck %s

func.func @clip_scale(%s: tensor<f32>, %hp: tensor<5xf32>) {
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([], [i]) -> ([]) {i=5} replicated={i}
  %0 = tp.clip_scale %s, %hp : (tensor<f32>, tensor<5xf32>) -> tensor<f32>
  return
}
