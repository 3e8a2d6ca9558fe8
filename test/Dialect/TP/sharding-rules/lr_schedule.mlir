// RUN: tpc-opt %s --tp-print-sharding-rules --mlir-print-op-on-diagnostic=false -o /dev/null 2>&1 | FileCheck %s

func.func @lr_schedule(%step: tensor<i64>, %hp: tensor<5xf32>) {
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([], [i]) -> ([]) {i=5} replicated={i}
  %0 = tp.lr_schedule %step, %hp : (tensor<i64>, tensor<5xf32>) -> tensor<f32>
  return
}
