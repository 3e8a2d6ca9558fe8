// RUN: tpc-opt %s --tp-print-sharding-rules --mlir-print-op-on-diagnostic=false -o /dev/null 2>&1 | FileCheck %s

// A KV cache write shares the batch, heads and features with its update; the
// positions index the cache's sequence globally, so neither sequence splits.
func.func @cache_write(%cache: tensor<2x4x16x8xf32>, %k: tensor<2x4x3x8xf32>, %positions: tensor<2x3xi32>) {
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, j, k, l], [i, j, m, l], [i, m]) -> ([i, j, k, l]) {i=2, j=4, k=16, l=8, m=3} replicated={k, m}
  %0 = tp.cache_write %cache, %k, %positions : (tensor<2x4x16x8xf32>, tensor<2x4x3x8xf32>, tensor<2x3xi32>) -> tensor<2x4x16x8xf32>
  return
}
