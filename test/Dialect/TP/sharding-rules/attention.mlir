// RUN: tpc-opt %s --tp-print-sharding-rules --mlir-print-op-on-diagnostic=false -o /dev/null 2>&1 | FileCheck %s

// Only the batch dims (batch, key/value heads, the query heads sharing one)
// split freely: the fused kernel normalises over whole key rows and
// contracts whole features, and a causal mask compares global positions.
// Key and value broadcast over the group (`_`).
func.func @attention(%q: tensor<2x4x3x8x16xf32>, %k: tensor<2x4x1x8x16xf32>, %v: tensor<2x4x1x8x12xf32>, %positions: tensor<2x8xi32>) {
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, j, k, l, n], [i, j, _, m, n], [i, j, _, m, o]) -> ([i, j, k, l, o], [i, j, k, l]) {i=2, j=4, k=3, l=8, m=8, n=16, o=12} replicated={l, m, n, o}
  %0:2 = tp.attention %q, %k, %v {alpha = 0.25 : f64, causal} : (tensor<2x4x3x8x16xf32>, tensor<2x4x1x8x16xf32>, tensor<2x4x1x8x12xf32>) -> (tensor<2x4x3x8x12xf32>, tensor<2x4x3x8xf32>)
  // Without a mask the queries split too.
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, j, k, l, n], [i, j, _, m, n], [i, j, _, m, o]) -> ([i, j, k, l, o], [i, j, k, l]) {i=2, j=4, k=3, l=8, m=8, n=16, o=16} replicated={m, n, o}
  %1:2 = tp.attention %q, %k, %k : (tensor<2x4x3x8x16xf32>, tensor<2x4x1x8x16xf32>, tensor<2x4x1x8x16xf32>) -> (tensor<2x4x3x8x16xf32>, tensor<2x4x3x8xf32>)
  // Over a KV cache the positions ([batch, queries]) travel with the
  // queries, which split; the cached keys do not.
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, j, k, l, n], [i, j, _, m, n], [i, j, _, m, o], [i, l]) -> ([i, j, k, l, o], [i, j, k, l]) {i=2, j=4, k=3, l=8, m=8, n=16, o=16} replicated={m, n, o}
  %3:2 = tp.attention %q, %k, %k, %positions {alpha = 0.25 : f64} : (tensor<2x4x3x8x16xf32>, tensor<2x4x1x8x16xf32>, tensor<2x4x1x8x16xf32>, tensor<2x8xi32>) -> (tensor<2x4x3x8x16xf32>, tensor<2x4x3x8xf32>)
  // The key and value gradients sum over the group: split, they are
  // partial sums.
  // CHECK: :[[@LINE+1]]:{{.*}} remark: sharding rule: ([i, j, k, l, o], [i, j, k, l, n], [i, j, _, m, n], [i, j, _, m, o], [i, j, k, l, o], [i, j, k, l]) -> ([i, j, k, l, n], [i, j, _, m, n], [i, j, _, m, o]) {i=2, j=4, k=3, l=8, m=8, n=16, o=12} reduction={k} replicated={l, m, n, o}
  %2:3 = tp.attention_grad %0#0, %q, %k, %v, %0#0, %0#1 {alpha = 0.25 : f64, causal} : (tensor<2x4x3x8x12xf32>, tensor<2x4x3x8x16xf32>, tensor<2x4x1x8x16xf32>, tensor<2x4x1x8x12xf32>, tensor<2x4x3x8x12xf32>, tensor<2x4x3x8xf32>) -> (tensor<2x4x3x8x16xf32>, tensor<2x4x1x8x16xf32>, tensor<2x4x1x8x12xf32>)
  return
}
