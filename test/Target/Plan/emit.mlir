// The plan holds the parameters (by HF name, with their init), each program's
// tensors with their storage (arena offsets from tp-plan-memory, parameters,
// inputs), and the steps with their attributes. tp-run --print-plan loads it
// through the full verifier and prints it as JSON.
// RUN: tpc-opt %s --tp-pipeline="train=false" -o %t.tpplan
// RUN: tp-run %t.tpplan --print-plan > %t.json
// RUN: %json %t.json version content_checksum grid model_type params# params.0 params.1 params.2 programs# programs.0.name programs.0.arena_bytes programs.0.inputs programs.0.results programs.0.result_names programs.0.tensors# programs.0.tensors.0 programs.0.tensors.1 programs.0.tensors.2 programs.0.tensors.3 programs.0.tensors.4 programs.0.tensors.5 programs.0.tensors.6 programs.0.tensors.7 programs.0.steps# programs.0.steps.0 programs.0.steps.1 programs.0.steps.2 programs.0.steps.3 | FileCheck %s

// CHECK: version = "1.15"
// CHECK-NEXT: content_checksum = "{{([0-9a-f]{16})}}"
// CHECK-NEXT: grid = [1]
// CHECK-NEXT: model_type = "test"
// CHECK-NEXT: params# = 3
// CHECK-NEXT: params.0 = {"name": "emb.weight", "dtype": "F32", "shape": [16, 8], "init": "Normal", "init_std": 0.02}
// CHECK-NEXT: params.1 = {"name": "norm.weight", "dtype": "F32", "shape": [8], "init": "Ones"}
// CHECK-NEXT: params.2 = {"name": "norm.bias", "dtype": "F32", "shape": [8], "init": "Zeros"}
// CHECK-NEXT: programs# = 1
// CHECK-NEXT: programs.0.name = "forward"
// CHECK-NEXT: programs.0.arena_bytes = 768
// CHECK-NEXT: programs.0.inputs = [{"kind": "Tokens", "tensor": 3}]
// CHECK-NEXT: programs.0.results = [7]
// CHECK-NEXT: programs.0.result_names = ["logits"]
// CHECK-NEXT: programs.0.tensors# = 8
// CHECK-NEXT: programs.0.tensors.0 = {"id": 0, "dtype": "F32", "shape": [16, 8], "storage": "Param", "index": 0}
// CHECK-NEXT: programs.0.tensors.1 = {"id": 1, "dtype": "F32", "shape": [8], "storage": "Param", "index": 1}
// CHECK-NEXT: programs.0.tensors.2 = {"id": 2, "dtype": "F32", "shape": [8], "storage": "Param", "index": 2}
// CHECK-NEXT: programs.0.tensors.3 = {"id": 3, "dtype": "I32", "shape": [2, 4], "storage": "Input", "index": 0}
// CHECK-NEXT: programs.0.tensors.4 = {"id": 4, "dtype": "F32", "shape": [2, 4, 8], "storage": "Arena", "offset": 0}
// CHECK-NEXT: programs.0.tensors.5 = {"id": 5, "dtype": "F32", "shape": [2, 4, 8], "storage": "Arena", "offset": 512}
// CHECK-NEXT: programs.0.tensors.6 = {"id": 6, "dtype": "F32", "shape": [8, 8], "storage": "Arena", "offset": 512}
// CHECK-NEXT: programs.0.tensors.7 = {"id": 7, "dtype": "F32", "shape": [8, 16], "storage": "Arena", "offset": 0}
// CHECK-NEXT: programs.0.steps# = 4
// CHECK-NEXT: programs.0.steps.0 = {"op": "Embedding", "operands": [0, 3], "results": [4], "location": "embed"}
// CHECK-NEXT: programs.0.steps.1 = {"op": "LayerNorm", "operands": [4, 1, 2], "results": [5], "epsilon": 0.001, "location": "{{.*}}emit.mlir:[[@LINE+10]]:10"}
// CHECK-NEXT: programs.0.steps.2 = {"op": "Reshape", "operands": [5], "results": [6], "location": "{{.*}}"}
// CHECK-NEXT: programs.0.steps.3 = {"op": "Matmul", "operands": [6, 0], "results": [7], "transpose_rhs": true, "alpha": 0.25, "location": "{{.*}}"}

module attributes {tp.model_type = "test"} {
  func.func @forward(%emb: tensor<16x8xf32> {tp.param = "emb.weight", tp.init = "normal", tp.init_std = 0.02 : f64},
                     %g: tensor<8xf32> {tp.param = "norm.weight", tp.init = "ones"},
                     %b: tensor<8xf32> {tp.param = "norm.bias", tp.init = "zeros"},
                     %tokens: tensor<2x4xi32> {tp.input = "tokens"}) -> (tensor<8x16xf32> {tp.output = "logits"}) {
    %0 = tp.embedding %emb, %tokens : (tensor<16x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32> loc("embed")
    %1 = tp.layer_norm %0, %g, %b {epsilon = 1.0e-3 : f64} : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
    %2 = tp.reshape %1 : (tensor<2x4x8xf32>) -> tensor<8x8xf32>
    %3 = tp.matmul %2, %emb {transpose_rhs} : (tensor<8x8xf32>, tensor<16x8xf32>) -> tensor<8x16xf32>
    // tp-pipeline folds this into the matmul's alpha.
    %4 = tp.scale %3, 0.25 : tensor<8x16xf32>
    return %4 : tensor<8x16xf32>
  }
}
