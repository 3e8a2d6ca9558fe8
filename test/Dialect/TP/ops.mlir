// RUN: tpc-opt %s -split-input-file | tpc-opt -split-input-file | FileCheck %s
// RUN: tpc-opt %s -split-input-file -mlir-print-op-generic | tpc-opt -split-input-file | FileCheck %s
// RUN: tpc-opt %s -split-input-file --verify-roundtrip > /dev/null

// CHECK: tp.grid @g [2, 4]
// CHECK: tp.grid @cube [2, 2, 2]
tp.grid @g [2, 4]
tp.grid @cube [2, 2, 2]

// CHECK-LABEL: func.func @layouts
// CHECK-SAME{LITERAL}: tensor<8x16xf32, #tp.dist<@g, [[0], [1]]>>
// CHECK-SAME{LITERAL}: tensor<8x16xf32, #tp.dist<@g, [[], []], partial = [0, 1]>>
// CHECK-SAME{LITERAL}: tensor<8x16xf32, #tp.dist<@g, [[1, 0], []]>>
// CHECK-SAME{LITERAL}: tensor<7x16xf32, #tp.dist<@g, [[0], []], sizes = [[3, 4], []]>>
// CHECK-SAME{LITERAL}: tensor<8x16xf32, #tp.dist<@cube, [[0], [2]], partial = [1]>>
func.func @layouts(
    %a: tensor<8x16xf32, #tp.dist<@g, [[0], [1]]>>,
    %b: tensor<8x16xf32, #tp.dist<@g, [[], []], partial = [0, 1]>>,
    %c: tensor<8x16xf32, #tp.dist<@g, [[1, 0], []]>>,
    %d: tensor<7x16xf32, #tp.dist<@g, [[0], []], sizes = [[3, 4], []]>>,
    %e: tensor<8x16xf32, #tp.dist<@cube, [[0], [2]], partial = [1]>>) {
  return
}

// An all-even sizes list is dropped: the layout equals the one without it.
// CHECK-LABEL: func.func @even_sizes_dropped
// CHECK-SAME{LITERAL}: tensor<8x16xf32, #tp.dist<@g, [[0], []]>>
func.func @even_sizes_dropped(%a: tensor<8x16xf32, #tp.dist<@g, [[0], []], sizes = [[], []]>>) {
  return
}

// CHECK-LABEL: func.func @redistribute
// CHECK: tp.redistribute %{{.*}} : tensor<8x16xf32> -> tensor<8x16xf32, #tp.dist<@g, {{\[\[}}0], [1]]>>
// CHECK: tp.redistribute %{{.*}} : tensor<8x16xf32, #tp.dist<@g, {{\[\[}}], []], partial = [1]>> -> tensor<8x16xf32, #tp.dist<@g, {{\[\[}}1], []]>>
// CHECK: tp.redistribute %{{.*}} : tensor<4xi32> -> tensor<4xi32, #tp.dist<@g, {{\[\[}}0]]>>
func.func @redistribute(%x: tensor<8x16xf32>, %p: tensor<8x16xf32, #tp.dist<@g, [[], []], partial = [1]>>, %ids: tensor<4xi32>) {
  %0 = tp.redistribute %x : tensor<8x16xf32> -> tensor<8x16xf32, #tp.dist<@g, [[0], [1]]>>
  %1 = tp.redistribute %p : tensor<8x16xf32, #tp.dist<@g, [[], []], partial = [1]>> -> tensor<8x16xf32, #tp.dist<@g, [[1], []]>>
  %2 = tp.redistribute %ids : tensor<4xi32> -> tensor<4xi32, #tp.dist<@g, [[0]]>>
  return
}

// -----

// CHECK-LABEL: func.func @embedding
// CHECK: tp.embedding %{{.*}}, %{{.*}} : (tensor<50x16xf32>, tensor<2x8xi32>) -> tensor<2x8x16xf32>
// CHECK: tp.embedding_grad %{{.*}}, %{{.*}} : (tensor<2x8x16xf32>, tensor<2x8xi32>) -> tensor<50x16xf32>
// CHECK: tp.embedding %{{.*}}, %{{.*}} : (tensor<50x16xbf16>, tensor<8xi64>) -> tensor<8x16xbf16>
func.func @embedding(%table: tensor<50x16xf32>, %ids: tensor<2x8xi32>, %dy: tensor<2x8x16xf32>,
                     %table16: tensor<50x16xbf16>, %ids64: tensor<8xi64>) {
  %0 = tp.embedding %table, %ids : (tensor<50x16xf32>, tensor<2x8xi32>) -> tensor<2x8x16xf32>
  %1 = tp.embedding_grad %dy, %ids : (tensor<2x8x16xf32>, tensor<2x8xi32>) -> tensor<50x16xf32>
  %2 = tp.embedding %table16, %ids64 : (tensor<50x16xbf16>, tensor<8xi64>) -> tensor<8x16xbf16>
  return
}

// -----

// CHECK-LABEL: func.func @matmul
// CHECK: tp.matmul %{{.*}}, %{{.*}} : (tensor<2x8x16xf32>, tensor<16x32xf32>) -> tensor<2x8x32xf32>
// CHECK: tp.matmul %{{.*}}, %{{.*}} {transpose_rhs} : (tensor<2x8x32xf32>, tensor<16x32xf32>) -> tensor<2x8x16xf32>
// CHECK: tp.matmul %{{.*}}, %{{.*}} {alpha = 5.000000e-01 : f64, transpose_lhs} : (tensor<16x8xf16>, tensor<16x32xf16>) -> tensor<8x32xf16>
// CHECK: tp.matmul %{{.*}}, %{{.*}} {transpose_lhs, transpose_rhs} : (tensor<4x16x8xf32>, tensor<4x32x16xf32>) -> tensor<4x8x32xf32>
// CHECK: tp.matmul %{{.*}}, %{{.*}} {transpose_rhs} : (tensor<2x2x3x8x4xf32>, tensor<2x2x1x8x4xf32>) -> tensor<2x2x3x8x8xf32>
func.func @matmul(%x: tensor<2x8x16xf32>, %w: tensor<16x32xf32>, %y: tensor<2x8x32xf32>,
                  %a: tensor<16x8xf16>, %b: tensor<16x32xf16>,
                  %q: tensor<4x16x8xf32>, %k: tensor<4x32x16xf32>,
                  %gq: tensor<2x2x3x8x4xf32>, %gk: tensor<2x2x1x8x4xf32>) {
  %0 = tp.matmul %x, %w : (tensor<2x8x16xf32>, tensor<16x32xf32>) -> tensor<2x8x32xf32>
  %1 = tp.matmul %y, %w {transpose_rhs} : (tensor<2x8x32xf32>, tensor<16x32xf32>) -> tensor<2x8x16xf32>
  %2 = tp.matmul %a, %b {transpose_lhs, alpha = 0.5 : f64} : (tensor<16x8xf16>, tensor<16x32xf16>) -> tensor<8x32xf16>
  %3 = tp.matmul %q, %k {transpose_lhs, transpose_rhs} : (tensor<4x16x8xf32>, tensor<4x32x16xf32>) -> tensor<4x8x32xf32>
  %4 = tp.matmul %gq, %gk {transpose_rhs} : (tensor<2x2x3x8x4xf32>, tensor<2x2x1x8x4xf32>) -> tensor<2x2x3x8x8xf32>
  return
}

// -----

// CHECK-LABEL: func.func @elementwise
// CHECK: tp.add %{{.*}}, %{{.*}} : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
// CHECK: tp.sub %{{.*}}, %{{.*}} : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
// CHECK: tp.mul %{{.*}}, %{{.*}} : (tensor<2x8x16xf32>, tensor<2x8x1xf32>) -> tensor<2x8x16xf32>
// CHECK: tp.div %{{.*}}, %{{.*}} : (tensor<2x8x16xf32>, tensor<f32>) -> tensor<2x8x16xf32>
// CHECK: tp.scale %{{.*}}, 1.250000e-01 : tensor<2x8x16xf32>
// CHECK: tp.gelu %{{.*}} : tensor<2x8x16xf32>
// CHECK: tp.silu %{{.*}} : tensor<2x8x16xbf16>
// CHECK: tp.gelu_grad %{{.*}}, %{{.*}} : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
// CHECK: tp.silu_grad %{{.*}}, %{{.*}} : (tensor<2x8x16xbf16>, tensor<2x8x16xbf16>) -> tensor<2x8x16xbf16>
// CHECK: tp.relu %{{.*}} : tensor<2x8x16xf32>
// CHECK: tp.relu_grad %{{.*}}, %{{.*}} : (tensor<2x8x16xbf16>, tensor<2x8x16xbf16>) -> tensor<2x8x16xbf16>
func.func @elementwise(%x: tensor<2x8x16xf32>, %b: tensor<16xf32>, %r: tensor<2x8x1xf32>,
                       %s: tensor<f32>, %h: tensor<2x8x16xbf16>) {
  %0 = tp.add %x, %b : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  %1 = tp.sub %x, %0 : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  %2 = tp.mul %1, %r : (tensor<2x8x16xf32>, tensor<2x8x1xf32>) -> tensor<2x8x16xf32>
  %3 = tp.div %2, %s : (tensor<2x8x16xf32>, tensor<f32>) -> tensor<2x8x16xf32>
  %4 = tp.scale %3, 0.125 : tensor<2x8x16xf32>
  %5 = tp.gelu %4 : tensor<2x8x16xf32>
  %6 = tp.silu %h : tensor<2x8x16xbf16>
  %7 = tp.gelu_grad %5, %4 : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  %8 = tp.silu_grad %6, %h : (tensor<2x8x16xbf16>, tensor<2x8x16xbf16>) -> tensor<2x8x16xbf16>
  %9 = tp.relu %x : tensor<2x8x16xf32>
  %10 = tp.relu_grad %6, %h : (tensor<2x8x16xbf16>, tensor<2x8x16xbf16>) -> tensor<2x8x16xbf16>
  return
}

// -----

// CHECK-LABEL: func.func @norms
// CHECK: tp.layer_norm %{{.*}}, %{{.*}}, %{{.*}} : (tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
// CHECK: tp.layer_norm %{{.*}}, %{{.*}}, %{{.*}} {epsilon = 1.000000e-03 : f64}
// CHECK: tp.layer_norm_grad %{{.*}}, %{{.*}}, %{{.*}} : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<16xf32>) -> (tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>)
// CHECK: tp.rms_norm %{{.*}}, %{{.*}} : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
// CHECK: tp.rms_norm_grad %{{.*}}, %{{.*}}, %{{.*}} {epsilon = 1.000000e-05 : f64} : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<16xf32>) -> (tensor<2x8x16xf32>, tensor<16xf32>)
func.func @norms(%x: tensor<2x8x16xf32>, %g: tensor<16xf32>, %b: tensor<16xf32>, %dy: tensor<2x8x16xf32>) {
  %0 = tp.layer_norm %x, %g, %b : (tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  %1 = tp.layer_norm %x, %g, %b {epsilon = 1.0e-3 : f64} : (tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  %2:3 = tp.layer_norm_grad %dy, %x, %g : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<16xf32>) -> (tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>)
  %3 = tp.rms_norm %x, %g : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  %4:2 = tp.rms_norm_grad %dy, %x, %g {epsilon = 1.0e-5 : f64} : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<16xf32>) -> (tensor<2x8x16xf32>, tensor<16xf32>)
  return
}

// -----

// CHECK-LABEL: func.func @attention
// CHECK: tp.softmax %{{.*}} {causal} : tensor<2x4x8x8xf32>
// CHECK: tp.softmax %{{.*}} : tensor<2x8x50xf32>
// CHECK: tp.softmax_grad %{{.*}}, %{{.*}} : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
// CHECK: tp.rotary %{{.*}} : tensor<2x4x8x16xf32>
// CHECK: tp.rotary %{{.*}} {inverse, theta = 5.000000e+05 : f64} : tensor<2x4x8x16xf32>
func.func @attention(%s: tensor<2x4x8x8xf32>, %l: tensor<2x8x50xf32>, %q: tensor<2x4x8x16xf32>) {
  %0 = tp.softmax %s {causal} : tensor<2x4x8x8xf32>
  %1 = tp.softmax %l : tensor<2x8x50xf32>
  %2 = tp.softmax_grad %s, %0 : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %3 = tp.rotary %q : tensor<2x4x8x16xf32>
  %4 = tp.rotary %q {theta = 500000.0 : f64, inverse} : tensor<2x4x8x16xf32>
  return
}

// -----

// A generation step: keys written into a KV cache at their positions, the
// queries rotated to and attending up to them.
// CHECK-LABEL: func.func @generation
// CHECK: %[[K:.*]] = tp.cache_write %{{.*}}, %{{.*}}, %[[P:.*]] : (tensor<2x4x16x8xf32>, tensor<2x4x1x8xf32>, tensor<2x1xi32>) -> tensor<2x4x16x8xf32>
// CHECK: %[[Q:.*]] = tp.rotary %{{.*}} at %[[P]] : tensor<2x1xi32> : tensor<2x4x1x8xf32>
// CHECK: tp.attention %[[Q]], %[[K]], %[[K]], %[[P]] {alpha = 5.000000e-01 : f64}
func.func @generation(%cache: tensor<2x4x16x8xf32>, %q: tensor<2x4x1x8xf32>, %k: tensor<2x4x1x8xf32>, %positions: tensor<2x1xi32>) -> tensor<2x4x1x8xf32> {
  %0 = tp.cache_write %cache, %k, %positions : (tensor<2x4x16x8xf32>, tensor<2x4x1x8xf32>, tensor<2x1xi32>) -> tensor<2x4x16x8xf32>
  %1 = tp.rotary %q at %positions : tensor<2x1xi32> : tensor<2x4x1x8xf32>
  %2:2 = tp.attention %1, %0, %0, %positions {alpha = 0.5 : f64} : (tensor<2x4x1x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x1xi32>) -> (tensor<2x4x1x8xf32>, tensor<2x4x1xf32>)
  return %2#0 : tensor<2x4x1x8xf32>
}

// -----

// CHECK-LABEL: func.func @shapes
// CHECK: tp.reshape %{{.*}} : (tensor<2x8x16xf32>) -> tensor<2x8x4x4xf32>
// CHECK: tp.transpose %{{.*}} {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x4xf32>) -> tensor<2x4x8x4xf32>
// CHECK: tp.slice %{{.*}} {offsets = array<i64: 0, 4, 0>} : (tensor<2x8x16xf32>) -> tensor<2x2x16xf32>
// CHECK: tp.pad %{{.*}} {offsets = array<i64: 0, 4, 0>} : (tensor<2x2x16xf32>) -> tensor<2x8x16xf32>
// CHECK: tp.constant 1.000000e+00 : tensor<f32>
// CHECK: tp.constant -2.500000e-01 : tensor<2x3xbf16>
// CHECK: tp.reduce_sum %{{.*}} {dims = array<i64: 0, 1>} : (tensor<2x8x16xf32>) -> tensor<16xf32>
// CHECK: tp.reduce_mean %{{.*}} {dims = array<i64: 2>} : (tensor<2x8x16xf32>) -> tensor<2x8xf32>
func.func @shapes(%x: tensor<2x8x16xf32>) {
  %0 = tp.reshape %x : (tensor<2x8x16xf32>) -> tensor<2x8x4x4xf32>
  %1 = tp.transpose %0 {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x4xf32>) -> tensor<2x4x8x4xf32>
  %4 = tp.slice %x {offsets = array<i64: 0, 4, 0>} : (tensor<2x8x16xf32>) -> tensor<2x2x16xf32>
  %5 = tp.pad %4 {offsets = array<i64: 0, 4, 0>} : (tensor<2x2x16xf32>) -> tensor<2x8x16xf32>
  %6 = tp.constant 1.0 : tensor<f32>
  %7 = tp.constant -0.25 : tensor<2x3xbf16>
  %2 = tp.reduce_sum %x {dims = array<i64: 0, 1>} : (tensor<2x8x16xf32>) -> tensor<16xf32>
  %3 = tp.reduce_mean %x {dims = array<i64: 2>} : (tensor<2x8x16xf32>) -> tensor<2x8xf32>
  return
}

// -----

// CHECK-LABEL: func.func @loss
// CHECK: tp.cross_entropy %{{.*}}, %{{.*}} : (tensor<2x8x50xf32>, tensor<2x8xi32>) -> tensor<f32>
// CHECK: tp.cross_entropy_grad %{{.*}}, %{{.*}}, %{{.*}} : (tensor<2x8x50xf32>, tensor<2x8xi32>, tensor<f32>) -> tensor<2x8x50xf32>
func.func @loss(%logits: tensor<2x8x50xf32>, %t: tensor<2x8xi32>, %dl: tensor<f32>) {
  %0 = tp.cross_entropy %logits, %t : (tensor<2x8x50xf32>, tensor<2x8xi32>) -> tensor<f32>
  %1 = tp.cross_entropy_grad %logits, %t, %dl : (tensor<2x8x50xf32>, tensor<2x8xi32>, tensor<f32>) -> tensor<2x8x50xf32>
  return
}

// -----

// CHECK-LABEL: func.func @adamw
// CHECK: tp.adamw %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : (tensor<16x32xf32>, tensor<16x32xf32>, tensor<16x32xf32>, tensor<16x32xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> (tensor<16x32xf32>, tensor<16x32xf32>, tensor<16x32xf32>)
// CHECK: tp.adamw {{.*}} {beta1 = 8.000000e-01 : f64, beta2 = 5.000000e-01 : f64, epsilon = 9.9999999999999995E-7 : f64, weight_decay = 1.250000e-01 : f64} : (tensor<16xbf16>, tensor<16xbf16>, tensor<16xf32>, tensor<16xf32>, tensor<f32>, tensor<i64>, tensor<f32>)
// CHECK: tp.norm_squared %{{.*}} : (tensor<16x32xf32>) -> tensor<f32>
// CHECK: tp.lr_schedule %{{.*}}, %{{.*}} : (tensor<i64>, tensor<5xf32>) -> tensor<f32>
// CHECK: tp.clip_scale %{{.*}}, %{{.*}} : (tensor<f32>, tensor<5xf32>) -> tensor<f32>
func.func @adamw(%p: tensor<16x32xf32>, %g: tensor<16x32xf32>, %m: tensor<16x32xf32>, %v: tensor<16x32xf32>,
                 %lr: tensor<f32>, %step: tensor<i64>, %p16: tensor<16xbf16>, %g16: tensor<16xbf16>,
                 %m32: tensor<16xf32>, %v32: tensor<16xf32>, %hp: tensor<5xf32>) {
  %0:3 = tp.adamw %p, %g, %m, %v, %lr, %step, %lr : (tensor<16x32xf32>, tensor<16x32xf32>, tensor<16x32xf32>, tensor<16x32xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> (tensor<16x32xf32>, tensor<16x32xf32>, tensor<16x32xf32>)
  %1:3 = tp.adamw %p16, %g16, %m32, %v32, %lr, %step, %lr {beta1 = 0.8 : f64, beta2 = 0.5 : f64, epsilon = 1.0e-6 : f64, weight_decay = 0.125 : f64} : (tensor<16xbf16>, tensor<16xbf16>, tensor<16xf32>, tensor<16xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> (tensor<16xbf16>, tensor<16xf32>, tensor<16xf32>)
  %2 = tp.norm_squared %g : (tensor<16x32xf32>) -> tensor<f32>
  %3 = tp.lr_schedule %step, %hp : (tensor<i64>, tensor<5xf32>) -> tensor<f32>
  %4 = tp.clip_scale %2, %hp : (tensor<f32>, tensor<5xf32>) -> tensor<f32>
  return
}

// -----

tp.grid @c [2, 2]
// CHECK-LABEL: func.func @collectives
// CHECK: tp.all_reduce %{{.*}} over @c {grid_axes = array<i64: 1>} : tensor<8x16xf32, #tp.dist<@c, {{\[\[}}0], []], partial = [1]>> -> tensor<8x16xf32, #tp.dist<@c, {{\[\[}}0], []]>>
// CHECK: tp.reduce_scatter %{{.*}} over @c {dim = 1 : i64, grid_axes = array<i64: 1>}
// CHECK: tp.all_gather %{{.*}} over @c {dim = 1 : i64, grid_axes = array<i64: 1>}
// CHECK: tp.all_to_all %{{.*}} over @c {grid_axes = array<i64: 0>, source_dim = 0 : i64, target_dim = 1 : i64}
// CHECK: tp.local_split %{{.*}} over @c {dim = 0 : i64, grid_axes = array<i64: 0, 1>} : tensor<8x16xf32> -> tensor<8x16xf32, #tp.dist<@c, {{\[\[}}0, 1], []]>>
func.func @collectives(%p: tensor<8x16xf32, #tp.dist<@c, [[0], []], partial = [1]>>, %x: tensor<8x16xf32>) {
  %0 = tp.all_reduce %p over @c {grid_axes = array<i64: 1>} : tensor<8x16xf32, #tp.dist<@c, [[0], []], partial = [1]>> -> tensor<8x16xf32, #tp.dist<@c, [[0], []]>>
  %1 = tp.reduce_scatter %p over @c {dim = 1 : i64, grid_axes = array<i64: 1>} : tensor<8x16xf32, #tp.dist<@c, [[0], []], partial = [1]>> -> tensor<8x16xf32, #tp.dist<@c, [[0], [1]]>>
  %2 = tp.all_gather %1 over @c {dim = 1 : i64, grid_axes = array<i64: 1>} : tensor<8x16xf32, #tp.dist<@c, [[0], [1]]>> -> tensor<8x16xf32, #tp.dist<@c, [[0], []]>>
  %3 = tp.all_to_all %2 over @c {source_dim = 0 : i64, target_dim = 1 : i64, grid_axes = array<i64: 0>} : tensor<8x16xf32, #tp.dist<@c, [[0], []]>> -> tensor<8x16xf32, #tp.dist<@c, [[], [0]]>>
  %4 = tp.local_split %x over @c {dim = 0 : i64, grid_axes = array<i64: 0, 1>} : tensor<8x16xf32> -> tensor<8x16xf32, #tp.dist<@c, [[0, 1], []]>>
  return
}

// -----

// Mixed precision: bf16 activations, f32 gains, tables and statistics, and
// results whose type the op chooses (a product's f32 accumulator).
// CHECK-LABEL: func.func @mixed_precision
// CHECK: tp.convert %{{.*}} : tensor<16x32xf32> -> tensor<16x32xbf16>
// CHECK: tp.embedding %{{.*}}, %{{.*}} : (tensor<50x16xf32>, tensor<2x8xi32>) -> tensor<2x8x16xbf16>
// CHECK: tp.layer_norm %{{.*}}, %{{.*}}, %{{.*}} : (tensor<2x8x16xbf16>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x8x16xbf16>
// CHECK: tp.matmul %{{.*}}, %{{.*}} : (tensor<2x8x16xbf16>, tensor<16x32xbf16>) -> tensor<2x8x32xbf16>
// CHECK: tp.matmul %{{.*}}, %{{.*}} {transpose_lhs} : (tensor<2x8x16xbf16>, tensor<2x8x32xbf16>) -> tensor<2x16x32xf32>
// CHECK: tp.reduce_sum %{{.*}} {dims = array<i64: 0, 1>} : (tensor<2x8x32xbf16>) -> tensor<32xf32>
// CHECK: tp.attention %{{.*}}, %{{.*}}, %{{.*}} {causal} : (tensor<2x8x16xbf16>, tensor<2x8x16xbf16>, tensor<2x8x16xbf16>) -> (tensor<2x8x16xbf16>, tensor<2x8xf32>)
// CHECK: tp.cross_entropy %{{.*}}, %{{.*}} : (tensor<2x8x32xbf16>, tensor<2x8xi32>) -> tensor<f32>
// CHECK: tp.embedding_grad %{{.*}}, %{{.*}} : (tensor<2x8x16xbf16>, tensor<2x8xi32>) -> tensor<50x16xf32>
func.func @mixed_precision(%w: tensor<16x32xf32>, %table: tensor<50x16xf32>,
                           %ids: tensor<2x8xi32>, %g: tensor<16xf32>) {
  %w16 = tp.convert %w : tensor<16x32xf32> -> tensor<16x32xbf16>
  %x = tp.embedding %table, %ids : (tensor<50x16xf32>, tensor<2x8xi32>) -> tensor<2x8x16xbf16>
  %n = tp.layer_norm %x, %g, %g : (tensor<2x8x16xbf16>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x8x16xbf16>
  %y = tp.matmul %n, %w16 : (tensor<2x8x16xbf16>, tensor<16x32xbf16>) -> tensor<2x8x32xbf16>
  %dw = tp.matmul %n, %y {transpose_lhs} : (tensor<2x8x16xbf16>, tensor<2x8x32xbf16>) -> tensor<2x16x32xf32>
  %db = tp.reduce_sum %y {dims = array<i64: 0, 1>} : (tensor<2x8x32xbf16>) -> tensor<32xf32>
  %a:2 = tp.attention %n, %n, %n {causal} : (tensor<2x8x16xbf16>, tensor<2x8x16xbf16>, tensor<2x8x16xbf16>) -> (tensor<2x8x16xbf16>, tensor<2x8xf32>)
  %l = tp.cross_entropy %y, %ids : (tensor<2x8x32xbf16>, tensor<2x8xi32>) -> tensor<f32>
  %dt = tp.embedding_grad %x, %ids : (tensor<2x8x16xbf16>, tensor<2x8xi32>) -> tensor<50x16xf32>
  return
}

// -----

// Fused elementwise chains (tp-fuse-elementwise), and a norm gradient that
// adds the residual stream's.
// CHECK-LABEL: func.func @fused_elementwise
// CHECK: tp.swiglu %arg0, %arg1 : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
// CHECK: tp.swiglu_grad %arg0, %arg0, %arg1 : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> (tensor<2x8x16xf32>, tensor<2x8x16xf32>)
// CHECK: tp.add_layer_norm %arg0, %arg1, %arg2, %arg2 {epsilon = 2.000000e-03 : f64} : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> (tensor<2x8x16xf32>, tensor<2x8x16xf32>)
// CHECK: tp.add_rms_norm %arg0, %arg1, %arg2 : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<16xf32>) -> (tensor<2x8x16xf32>, tensor<2x8x16xf32>)
// CHECK: tp.layer_norm_grad %arg0, %arg1, %arg2, %arg0 : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<16xf32>, tensor<2x8x16xf32>) -> (tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>)
// CHECK: tp.rms_norm_grad %arg0, %arg1, %arg2, %arg0 : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<16xf32>, tensor<2x8x16xf32>) -> (tensor<2x8x16xf32>, tensor<16xf32>)
func.func @fused_elementwise(%a: tensor<2x8x16xf32>, %b: tensor<2x8x16xf32>, %g: tensor<16xf32>) {
  %0 = tp.swiglu %a, %b : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  %1:2 = tp.swiglu_grad %a, %a, %b : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> (tensor<2x8x16xf32>, tensor<2x8x16xf32>)
  %2:2 = tp.add_layer_norm %a, %b, %g, %g {epsilon = 2.0e-3 : f64} : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> (tensor<2x8x16xf32>, tensor<2x8x16xf32>)
  %3:2 = tp.add_rms_norm %a, %b, %g : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<16xf32>) -> (tensor<2x8x16xf32>, tensor<2x8x16xf32>)
  %4:3 = tp.layer_norm_grad %a, %b, %g, %a : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<16xf32>, tensor<2x8x16xf32>) -> (tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>)
  %5:2 = tp.rms_norm_grad %a, %b, %g, %a : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<16xf32>, tensor<2x8x16xf32>) -> (tensor<2x8x16xf32>, tensor<16xf32>)
  return
}

// -----

// Products fused with their epilogues (tp-fuse-products).
// CHECK-LABEL: func.func @fused_products
// CHECK: tp.linear %arg0, %arg1, %arg2 {gelu, transpose_rhs} : (tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> (tensor<2x4x16xf32>, tensor<2x4x16xf32>)
// CHECK: tp.linear %arg0, %arg1, %arg2 {transpose_rhs} : (tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
// CHECK: tp.linear_gelu_grad %arg0, %arg1, %{{.*}} {transpose_rhs} : (tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<2x4x16xf32>) -> (tensor<2x4x16xf32>, tensor<16xf32>)
// CHECK: tp.linear_cross_entropy %arg0, %arg1, %arg3 {chunk = 8 : i64, transpose_rhs} : (tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<2x4xi32>) -> tensor<f32>
// CHECK: tp.linear_cross_entropy_grad %arg0, %arg1, %arg3, %arg4 {chunk = 8 : i64, transpose_rhs} : (tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<2x4xi32>, tensor<f32>) -> (tensor<2x4x8xf32>, tensor<16x8xf32>)
func.func @fused_products(%x: tensor<2x4x8xf32>, %w: tensor<16x8xf32>, %b: tensor<16xf32>, %t: tensor<2x4xi32>, %dl: tensor<f32>) {
  %0:2 = tp.linear %x, %w, %b {gelu, transpose_rhs} : (tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> (tensor<2x4x16xf32>, tensor<2x4x16xf32>)
  %1 = tp.linear %x, %w, %b {transpose_rhs} : (tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
  %2:2 = tp.linear_gelu_grad %x, %w, %1 {transpose_rhs} : (tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<2x4x16xf32>) -> (tensor<2x4x16xf32>, tensor<16xf32>)
  %3 = tp.linear_cross_entropy %x, %w, %t {chunk = 8 : i64, transpose_rhs} : (tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<2x4xi32>) -> tensor<f32>
  %4:2 = tp.linear_cross_entropy_grad %x, %w, %t, %dl {chunk = 8 : i64, transpose_rhs} : (tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<2x4xi32>, tensor<f32>) -> (tensor<2x4x8xf32>, tensor<16x8xf32>)
  return
}

tp.grid @stages [2, 2]

// CHECK-LABEL: func.func @pipeline_transfers
// CHECK: tp.send_start %{{.*}} over @stages to 1 tag 3 {grid_axis = 0 : i64} : tensor<2x4xf32>
// CHECK: %[[R:.*]] = tp.recv_start over @stages from 1 tag 4 {grid_axis = 0 : i64} : tensor<2x4xf32>
// CHECK: tp.recv_wait %[[R]] : tensor<2x4xf32>
// CHECK: tp.send_wait %{{.*}} over @stages to 1 tag 3 {grid_axis = 0 : i64} : tensor<2x4xf32>
func.func @pipeline_transfers(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  tp.send_start %x over @stages to 1 tag 3 {grid_axis = 0 : i64} : tensor<2x4xf32>
  %0 = tp.recv_start over @stages from 1 tag 4 {grid_axis = 0 : i64} : tensor<2x4xf32>
  %1 = tp.recv_wait %0 : tensor<2x4xf32>
  tp.send_wait %x over @stages to 1 tag 3 {grid_axis = 0 : i64} : tensor<2x4xf32>
  return %1 : tensor<2x4xf32>
}
