// tp-simulate against figures computed by hand (Inputs/clusters/unit.json:
// 1 GFLOP/s in f32 and 4 in bf16, 1 GB/s of memory, nodes of 2 ranks at
// 1 GB/s and 1 us a message, 0.1 GB/s and 10 us between nodes).
// RUN: tpc-opt %s --split-input-file --tp-simulate=cluster=%S/Inputs/clusters/unit.json -o /dev/null 2>&1 | FileCheck %s
// RUN: tpc-opt %s --split-input-file --tp-simulate=cluster=%S/Inputs/clusters/slow-gemm.json -o /dev/null 2>&1 | FileCheck %s --check-prefix=SLOW
// Three devices for four ranks: ranks 0 and 1 share the first, so rank 0
// gets half its FLOP/s and memory bandwidth (matmul 8.388608 ms, gelu
// 0.262144 ms); the network is unchanged.
// RUN: sed 's/"source"/"devices": 3, "source"/' %S/Inputs/clusters/unit.json > %t.shared.json
// RUN: tpc-opt %s --split-input-file --tp-simulate=cluster=%t.shared.json -o /dev/null 2>&1 | FileCheck %s --check-prefix=SHARED

// matmul 2*64*256*128 = 4194304 flops: 4.194304 ms; gelu streams 2 x 65536
// bytes: 0.131072 ms; the all-reduce over 4 ranks spans both nodes: 6 ring
// steps of 10 us and 2*3/4*65536 = 98304 bytes at 0.1 GB/s: 1.04304 ms.
// Arguments 32768 + 131072 bytes.
// CHECK: remark: @step on unit: 5.368 ms per run (products 4.194 ms, 4.194e+06 flops; other kernels 0.131 ms; exchanges 1.043 ms, 1.043 ms exposed); 163840 bytes per rank (arena 0 + arguments 163840)
// A quarter of the peak (0.5 x F / (F + F)) and 10 us a kernel: matmul
// 16.787216 ms, gelu 0.141072 ms, the all-reduce 0.01 + 0.098304 ms.
// SLOW: remark: @step on slow-gemm: 17.037 ms per run (products 16.787 ms, 4.194e+06 flops; other kernels 0.141 ms; exchanges 0.098 ms, 0.098 ms exposed)
// half_flops per precision: f32's as before, bf16's 0 (the bf16 product of
// @inner, 32768 flops at half of 1 GFLOP/s, 65.536 us + 10 us, where f32's
// half_flops would make it 8.464 ms).
// RUN: sed 's/"half_flops": 4194304/"half_flops": {"f32": 4194304, "bf16": 0}/' %S/Inputs/clusters/slow-gemm.json > %t.half.json
// RUN: tpc-opt %s --split-input-file --tp-simulate=cluster=%t.half.json -o /dev/null 2>&1 | FileCheck %s --check-prefix=HALF
// HALF: remark: @step on slow-gemm: 17.037 ms per run
// HALF: remark: @inner on slow-gemm: 0.090 ms per run (products 0.076 ms
// One link per node between nodes ("links": 1): a group holding both
// ranks of each node it spans crosses alone (the first case, unchanged); the
// shift over axis 0 of a 4x2 grid (ranks 0, 2, 4, 6) shares each node's link
// with the group of ranks 1, 3, 5, 7: 4000 bytes at 0.05 GB/s + 10 us = 90
// us, 88 us exposed past the 2 us product.
// RUN: sed 's/"level": "cluster",/"level": "cluster", "links": 1,/' %S/Inputs/clusters/unit.json > %t.links.json
// RUN: tpc-opt %s --split-input-file --tp-simulate=cluster=%t.links.json -o /dev/null 2>&1 | FileCheck %s --check-prefix=LINKS
// LINKS: remark: @step on unit: 5.368 ms per run
// LINKS: remark: @exposed on unit: 0.090 ms per run (products 0.002 ms, 2.000e+03 flops; other kernels 0.000 ms; exchanges 0.090 ms, 0.088 ms exposed)
// SHARED: remark: @step on unit: 9.694 ms per run (products 8.389 ms, 4.194e+06 flops; other kernels 0.262 ms; exchanges 1.043 ms, 1.043 ms exposed)
tp.grid @tp [4]
func.func @step(%x: tensor<64x128xf32>, %w: tensor<128x256xf32>) -> tensor<64x256xf32> {
  %y = tp.matmul %x, %w : (tensor<64x128xf32>, tensor<128x256xf32>) -> tensor<64x256xf32>
  %z = tp.gelu %y : tensor<64x256xf32>
  %r = tp.all_reduce %z over @tp {grid_axes = array<i64: 0>} : tensor<64x256xf32> -> tensor<64x256xf32>
  return %r : tensor<64x256xf32>
}

// -----

// A group inside one node (axis 1 of a 2x2 grid: ranks 0 and 1): 2 ring
// steps of 1 us and 2*1/2*4096 bytes at 1 GB/s = 6.096 us. A bf16 product
// at 4 GFLOP/s: 2*16*64*16 / 4e9 = 8.192 us. A reshape runs nothing.
// CHECK: remark: @inner on unit: 0.014 ms per run (products 0.008 ms, 3.277e+04 flops; other kernels 0.000 ms; exchanges 0.006 ms, 0.006 ms exposed)
tp.grid @g [2, 2]
func.func @inner(%x: tensor<16x16xf32>, %w: tensor<16x64xf32>) -> tensor<1024xf32> {
  %y = tp.matmul %x, %w {precision = bf16} : (tensor<16x16xf32>, tensor<16x64xf32>) -> tensor<16x64xf32>
  %r = tp.all_reduce %y over @g {grid_axes = array<i64: 1>} : tensor<16x64xf32> -> tensor<16x64xf32>
  %v = tp.reshape %r : (tensor<16x64xf32>) -> tensor<1024xf32>
  return %v : tensor<1024xf32>
}

// -----

// Under mixed precision products read bf16 operands as stored, with no
// precision attribute: the bf16 peak too (8.192 us), not f32's (32.768).
// CHECK: remark: @stored on unit: 0.008 ms per run (products 0.008 ms, 3.277e+04 flops; other kernels 0.000 ms
func.func @stored(%x: tensor<16x16xbf16>, %w: tensor<16x64xbf16>) -> tensor<16x64xbf16> {
  %y = tp.matmul %x, %w : (tensor<16x16xbf16>, tensor<16x64xbf16>) -> tensor<16x64xbf16>
  return %y : tensor<16x64xbf16>
}

// -----

// A ring shift overlaps what is computed between its start and its wait:
// 4000 bytes between ranks 0 and 1 of one node (1 us + 4 us) hide behind a
// 2 ms product (axis 1 of a 4x2 grid: ranks 0 and 1), and the same shift
// over axis 0 (ranks 0, 2, 4, 6: between nodes, 10 us + 40 us) shows 48 us
// past a 2 us product.
// CHECK: remark: @hidden on unit: 2.000 ms per run (products 2.000 ms, 2.000e+06 flops; other kernels 0.000 ms; exchanges 0.005 ms, 0.000 ms exposed); 44000 bytes per rank (arena 0 + arguments 44000)
// CHECK: remark: @exposed on unit: 0.050 ms per run (products 0.002 ms, 2.000e+03 flops; other kernels 0.000 ms; exchanges 0.050 ms, 0.048 ms exposed)
tp.grid @g [4, 2]
func.func @hidden(%a: tensor<1000xf32>, %x: tensor<100x100xf32>) -> (tensor<1000xf32>, tensor<100x100xf32>) {
  %s = tp.ring_shift_start %a over @g {grid_axes = array<i64: 1>} : tensor<1000xf32>
  %y = tp.matmul %x, %x : (tensor<100x100xf32>, tensor<100x100xf32>) -> tensor<100x100xf32>
  %b = tp.ring_shift_wait %s, %a : tensor<1000xf32>
  return %b, %y : tensor<1000xf32>, tensor<100x100xf32>
}
func.func @exposed(%a: tensor<1000xf32>, %x: tensor<10x10xf32>) -> (tensor<1000xf32>, tensor<10x10xf32>) {
  %s = tp.ring_shift_start %a over @g {grid_axes = array<i64: 0>} : tensor<1000xf32>
  %y = tp.matmul %x, %x : (tensor<10x10xf32>, tensor<10x10xf32>) -> tensor<10x10xf32>
  %b = tp.ring_shift_wait %s, %a : tensor<1000xf32>
  return %b, %y : tensor<1000xf32>, tensor<10x10xf32>
}

// -----

// A collective over a group of one rank moves nothing and streams nothing:
// only the kernel overhead (0 on unit.json), not the 8000 bytes it would
// stream as another kernel.
// CHECK: remark: @alone on unit: 0.000 ms per run (products 0.000 ms, 0.000e+00 flops; other kernels 0.000 ms; exchanges 0.000 ms, 0.000 ms exposed)
tp.grid @g [1, 4]
func.func @alone(%x: tensor<1000xf32>) -> tensor<1000xf32> {
  %r = tp.all_reduce %x over @g {grid_axes = array<i64: 0>} : tensor<1000xf32> -> tensor<1000xf32>
  return %r : tensor<1000xf32>
}

// -----

// Attention (2 heads of 64 queries and keys, D 16, causal) on the unit
// device: fused, its products alone, the masked half skipped:
// 2*2*2080*(16+16) = 266240 flops (0.266 ms) forward, 2*2*2080*(48+32) =
// 665600 (0.666 ms) backward, which recomputes the scores. Materialised
// (Megatron-LM 2021; bytes per score 13 forward, 19 backward): every score,
// 2*2*4096*32 = 524288 flops (0.524 ms), plus 8192 scores x 13 bytes at
// 1 GB/s (0.106 ms); the backward's 2*2*4096*64 = 1048576 flops (1.049 ms)
// from the stored probabilities, plus 8192 x 19 bytes (0.156 ms).
// RUN: sed 's/"memory_bandwidth": 1e9/"memory_bandwidth": 1e9, "materialized_attention": {"forward_bytes_per_score": 13, "backward_bytes_per_score": 19}/' %S/Inputs/clusters/unit.json > %t.materialized.json
// RUN: tpc-opt %s --split-input-file --tp-simulate=cluster=%t.materialized.json -o /dev/null 2>&1 | FileCheck %s --check-prefix=MATERIALIZED
// CHECK: remark: @attend on unit: 0.932 ms per run (products 0.932 ms, 9.318e+05 flops;
// MATERIALIZED: remark: @attend on unit: 1.835 ms per run (products 1.835 ms, 1.573e+06 flops;
func.func @attend(%q: tensor<2x64x16xf32>, %k: tensor<2x64x16xf32>, %v: tensor<2x64x16xf32>, %dy: tensor<2x64x16xf32>) -> (tensor<2x64x16xf32>, tensor<2x64x16xf32>, tensor<2x64x16xf32>) {
  %o, %lse = tp.attention %q, %k, %v {alpha = 2.500000e-01 : f64, causal} : (tensor<2x64x16xf32>, tensor<2x64x16xf32>, tensor<2x64x16xf32>) -> (tensor<2x64x16xf32>, tensor<2x64xf32>)
  %dq, %dk, %dv = tp.attention_grad %dy, %q, %k, %v, %o, %lse {alpha = 2.500000e-01 : f64, causal} : (tensor<2x64x16xf32>, tensor<2x64x16xf32>, tensor<2x64x16xf32>, tensor<2x64x16xf32>, tensor<2x64x16xf32>, tensor<2x64xf32>) -> (tensor<2x64x16xf32>, tensor<2x64x16xf32>, tensor<2x64x16xf32>)
  return %dq, %dk, %dv : tensor<2x64x16xf32>, tensor<2x64x16xf32>, tensor<2x64x16xf32>
}
