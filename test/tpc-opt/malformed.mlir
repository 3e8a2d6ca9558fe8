// Malformed input gives a located diagnostic and exit code 1.
// RUN: not tpc-opt %s 2>&1 >/dev/null | FileCheck %s
// RUN: tpc-opt %s >/dev/null 2>&1; test $? -eq 1
// RUN: not tpc-opt %tpc_src_root/test/tpc-opt/Inputs/bad-verifier.mlir 2>&1 >/dev/null | FileCheck %s --check-prefix=VERIFY
// RUN: tpc-opt %tpc_src_root/test/tpc-opt/Inputs/bad-verifier.mlir >/dev/null 2>&1; test $? -eq 1

// CHECK: malformed.mlir:[[@LINE+1]]:{{[0-9]+}}: error: expected ':'
func.func @f(%x tensor<8xf32>) {
  return
}

// VERIFY: bad-verifier.mlir:4:8: error: 'tp.matmul' op contraction sizes differ
