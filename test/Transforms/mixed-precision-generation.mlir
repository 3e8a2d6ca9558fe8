// tp-mixed-precision on a generation program.
// RUN: tpc-opt %s --tp-mixed-precision | FileCheck %s

// A generation step: the caches are bf16 arguments updated in place, the
// logits bf16, attention's log-sum-exp f32.
// CHECK-LABEL: func.func @decode
// CHECK-SAME: %[[K:[^:]*]]: tensor<2x16x8xbf16> {tp.cache = "0.key"}
// CHECK-SAME: -> (tensor<2x1x8xbf16> {tp.output = "logits"}, tensor<2x16x8xbf16> {tp.updates = 1 : i64})
// CHECK: %[[Q:.*]] = tp.embedding {{.*}} -> tensor<2x1x8xbf16>
// CHECK: %[[C:.*]] = tp.cache_write %[[K]], %[[Q]], %{{.*}} : (tensor<2x16x8xbf16>, tensor<2x1x8xbf16>, tensor<2x1xi32>) -> tensor<2x16x8xbf16>
// CHECK: tp.attention %[[Q]], %[[C]], %[[C]], %{{.*}} : {{.*}} -> (tensor<2x1x8xbf16>, tensor<2x1xf32>)
func.func @decode(%table: tensor<64x8xf32> {tp.param = "table"},
                  %k: tensor<2x16x8xf32> {tp.cache = "0.key"},
                  %tokens: tensor<2x1xi32> {tp.input = "tokens"},
                  %positions: tensor<2x1xi32> {tp.input = "positions"})
    -> (tensor<2x1x8xf32> {tp.output = "logits"}, tensor<2x16x8xf32> {tp.updates = 1 : i64}) {
  %q = tp.embedding %table, %tokens : (tensor<64x8xf32>, tensor<2x1xi32>) -> tensor<2x1x8xf32>
  %c = tp.cache_write %k, %q, %positions : (tensor<2x16x8xf32>, tensor<2x1x8xf32>, tensor<2x1xi32>) -> tensor<2x16x8xf32>
  %a:2 = tp.attention %q, %c, %c, %positions : (tensor<2x1x8xf32>, tensor<2x16x8xf32>, tensor<2x16x8xf32>, tensor<2x1xi32>) -> (tensor<2x1x8xf32>, tensor<2x1xf32>)
  return %a#0, %c : tensor<2x1x8xf32>, tensor<2x16x8xf32>
}
