// tp-mixed-precision: activations in bf16, parameters f32 masters. A weight
// a product or a sum reads is converted once per function (in its first
// user's layer); a view of a weight stays f32 and its consumer converts only
// what it reads; norms and embeddings read gains and tables as stored; the
// loss and attention's log-sum-exp stay f32, as does arithmetic on them; KV
// caches are bf16 (mixed-precision-generation.mlir).
// RUN: tpc-opt %s --tp-mixed-precision | FileCheck %s
// After differentiation the weight gradients' conversions fold into their
// products and sums, which accumulate in f32: no conversion to f32 is left,
// and AdamW reads f32 gradients.
// RUN: tpc-opt %s --tp-mixed-precision --tp-autodiff --canonicalize | FileCheck %s --check-prefix=GRAD

// CHECK-LABEL: func.func @loss
// CHECK-SAME: %[[W:[^:]*]]: tensor<8x16xf32>
// CHECK-SAME: %[[B:[^:]*]]: tensor<16xf32>
// CHECK-SAME: %[[POS:[^:]*]]: tensor<32x8xf32>
// CHECK-SAME: -> (tensor<f32>
// CHECK: %[[X:.*]] = tp.embedding %{{.*}}, %{{.*}} : (tensor<64x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xbf16>
// CHECK: %[[P:.*]] = tp.slice %[[POS]] {{.*}} -> tensor<4x8xf32>
// CHECK: %[[P16:.*]] = tp.convert %[[P]] : tensor<4x8xf32> -> tensor<4x8xbf16>
// CHECK: %[[H:.*]] = tp.add %[[X]], %[[P16]] : (tensor<2x4x8xbf16>, tensor<4x8xbf16>) -> tensor<2x4x8xbf16>
// CHECK: %[[N:.*]] = tp.layer_norm %[[H]], %{{.*}}, %{{.*}} {tp.layer = 0 : i64} : (tensor<2x4x8xbf16>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xbf16>
// CHECK: %[[W16:.*]] = tp.convert %[[W]] {tp.layer = 0 : i64} : tensor<8x16xf32> -> tensor<8x16xbf16>
// CHECK: %[[Y:.*]] = tp.matmul %[[N]], %[[W16]] {tp.layer = 0 : i64} : (tensor<2x4x8xbf16>, tensor<8x16xbf16>) -> tensor<2x4x16xbf16>
// CHECK: %[[B16:.*]] = tp.convert %[[B]] {tp.layer = 0 : i64} : tensor<16xf32> -> tensor<16xbf16>
// CHECK: tp.add %[[Y]], %[[B16]] {tp.layer = 0 : i64} : (tensor<2x4x16xbf16>, tensor<16xbf16>) -> tensor<2x4x16xbf16>
// CHECK: tp.gelu %{{.*}} : tensor<2x4x16xbf16>
// The second use of the weight reads the same copy.
// CHECK-NOT: tp.convert %[[W]]
// CHECK: tp.matmul %{{.*}}, %[[W16]] {tp.layer = 0 : i64, transpose_rhs} : (tensor<2x4x16xbf16>, tensor<8x16xbf16>) -> tensor<2x4x8xbf16>
// CHECK: %[[L:.*]] = tp.cross_entropy %{{.*}}, %{{.*}} : (tensor<2x4x8xbf16>, tensor<2x4xi32>) -> tensor<f32>
// CHECK: %[[S:.*]] = tp.scale %[[L]], 5.000000e-01 : tensor<f32>
// CHECK: return %[[S]] : tensor<f32>

// GRAD-LABEL: func.func @train_step
// GRAD-NOT: bf16> -> tensor<{{[0-9x]*}}xf32>
// The weight's two products each accumulate in f32 and are summed there.
// GRAD-DAG: %[[DW1:.*]] = tp.matmul {{.*}} : (tensor<8x8xbf16>, tensor<8x16xbf16>) -> tensor<8x16xf32>
// GRAD-DAG: %[[DW2:.*]] = tp.matmul {{.*}} : (tensor<8x8xbf16>, tensor<8x16xbf16>) -> tensor<8x16xf32>
// GRAD-DAG: %[[DW:.*]] = tp.add %[[DW1]], %[[DW2]] : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
// GRAD-DAG: tp.reduce_sum {{.*}}dims = array<i64: 0, 1>{{.*}} : (tensor<2x4x16xbf16>) -> tensor<16xf32>
// GRAD-DAG: tp.reduce_sum {{.*}}dims = array<i64: 0>{{.*}} : (tensor<2x4x8xbf16>) -> tensor<4x8xf32>
// GRAD-DAG: tp.embedding_grad {{.*}} : (tensor<2x4x8xbf16>, tensor<2x4xi32>) -> tensor<64x8xf32>
// GRAD-DAG: tp.layer_norm_grad {{.*}} -> (tensor<2x4x8xbf16>, tensor<8xf32>, tensor<8xf32>)
// GRAD-DAG: tp.adamw %arg0, %[[DW]], {{.*}} : (tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<f32>, tensor<i64>, tensor<f32>)
func.func @loss(%w: tensor<8x16xf32> {tp.param = "w"}, %b: tensor<16xf32> {tp.param = "b"},
                %pos: tensor<32x8xf32> {tp.param = "pos"}, %table: tensor<64x8xf32> {tp.param = "table"},
                %g: tensor<8xf32> {tp.param = "g"}, %beta: tensor<8xf32> {tp.param = "beta"},
                %tokens: tensor<2x4xi32> {tp.input = "tokens"},
                %targets: tensor<2x4xi32> {tp.input = "targets"}) -> (tensor<f32> {tp.output = "loss"}) {
  %x = tp.embedding %table, %tokens : (tensor<64x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
  %p = tp.slice %pos {offsets = array<i64: 0, 0>} : (tensor<32x8xf32>) -> tensor<4x8xf32>
  %h = tp.add %x, %p : (tensor<2x4x8xf32>, tensor<4x8xf32>) -> tensor<2x4x8xf32>
  %n = tp.layer_norm %h, %g, %beta {tp.layer = 0 : i64} : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %y = tp.matmul %n, %w {tp.layer = 0 : i64} : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  %yb = tp.add %y, %b {tp.layer = 0 : i64} : (tensor<2x4x16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
  %a = tp.gelu %yb {tp.layer = 0 : i64} : tensor<2x4x16xf32>
  %o = tp.matmul %a, %w {tp.layer = 0 : i64, transpose_rhs} : (tensor<2x4x16xf32>, tensor<8x16xf32>) -> tensor<2x4x8xf32>
  %l = tp.cross_entropy %o, %targets : (tensor<2x4x8xf32>, tensor<2x4xi32>) -> tensor<f32>
  %s = tp.scale %l, 0.5 : tensor<f32>
  return %s : tensor<f32>
}
