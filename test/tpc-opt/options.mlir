// A bad pass option is one line naming the option, exit code 1, before the
// input is read (no module dump). Each spelling is the MLIR one.

// RUN: not tpc-opt %s --tp-shard=grid=two 2>&1 | FileCheck %s --check-prefix=GRID
// RUN: not tpc-opt %s --tp-shard=grid=two 2>&1 | count 1
// GRID: tpc-opt: for the --grid option: 'two' is not a grid shape like 4, 2x2 or 2x2x2: 'two' is not a positive integer
// RUN: not tpc-opt %s --tp-shard=grid=2x0 2>&1 | FileCheck %s --check-prefix=GRID-ZERO
// GRID-ZERO: for the --grid option: '2x0' is not a grid shape like 4, 2x2 or 2x2x2: '0' is not a positive integer
// RUN: not tpc-opt %s --tp-shard=grid=2x2x2x2 2>&1 | FileCheck %s --check-prefix=GRID-AXES
// GRID-AXES: for the --grid option: '2x2x2x2' is not a grid shape like 4, 2x2 or 2x2x2: more than 3 axes
// RUN: not tpc-opt %s --tp-shard=grid=4096x4096 2>&1 | FileCheck %s --check-prefix=GRID-RANKS
// GRID-RANKS: for the --grid option: '4096x4096' is not a grid shape like 4, 2x2 or 2x2x2: more than 1048576 ranks
// RUN: not tpc-opt %s --tp-shard=grid=99999999999999999999 2>&1 | FileCheck %s --check-prefix=GRID-HUGE
// GRID-HUGE: for the --grid option: '99999999999999999999' is not a grid shape like 4, 2x2 or 2x2x2: '99999999999999999999' is not a positive integer

// RUN: not tpc-opt %s --tp-shard=grid=2x2 2>&1 | FileCheck %s --check-prefix=GRID-1D
// RUN: not tpc-opt %s --tp-shard=grid=2x2 2>&1 | count 1
// GRID-1D: tpc-opt: error: tp-shard: mode=1d needs a one-axis grid, got grid=2x2
// RUN: not tpc-opt %s --tp-shard=mode=4d 2>&1 | FileCheck %s --check-prefix=MODE
// MODE: tpc-opt: for the --mode option: Cannot find option named '4d'!
// RUN: not tpc-opt %s --tp-shard=mode=3d 2>&1 | FileCheck %s --check-prefix=GRID-3D
// GRID-3D: tpc-opt: error: tp-shard: mode=3d needs a cube grid QxQxQ, e.g. grid=2x2x2, got none
// RUN: not tpc-opt %s --tp-shard="mode=3d grid=2x2x4" 2>&1 | FileCheck %s --check-prefix=GRID-3D-CUBE
// GRID-3D-CUBE: tpc-opt: error: tp-shard: mode=3d needs a cube grid QxQxQ, e.g. grid=2x2x2, got grid=2x2x4
// RUN: not tpc-opt %s --tp-pipeline="mode=3d grid=2x2x2 seq-parallel=true" 2>&1 | FileCheck %s --check-prefix=SP-3D
// SP-3D: tpc-opt: error: tp-pipeline: seq-parallel=true is for mode=1d; mode=3d already splits activations over the whole grid
// RUN: not tpc-opt %s --tp-shard=mode=2d 2>&1 | FileCheck %s --check-prefix=GRID-2D
// GRID-2D: tpc-opt: error: tp-shard: mode=2d needs a grid QxQ, e.g. grid=2x2, got none
// RUN: not tpc-opt %s --tp-shard="mode=2d grid=2x4" 2>&1 | FileCheck %s --check-prefix=GRID-2D-SQUARE
// GRID-2D-SQUARE: tpc-opt: error: tp-shard: mode=2d needs as many rows as columns (QxQ, e.g. grid=2x2), got grid=2x4
// RUN: not tpc-opt %s --tp-shard="mode=2.5d grid=2x2" 2>&1 | FileCheck %s --check-prefix=GRID-25D
// GRID-25D: tpc-opt: error: tp-shard: mode=2.5d needs a grid QxQxD, e.g. grid=2x2x2, got grid=2x2
// RUN: not tpc-opt %s --tp-shard="mode=2d grid=2x2 seq-parallel=true" 2>&1 | FileCheck %s --check-prefix=SP-2D
// SP-2D: tpc-opt: error: tp-shard: seq-parallel=true is for mode=1d; mode=2d already splits activations over the whole grid
// RUN: not tpc-opt %s --tp-shard=mode=none 2>&1 | FileCheck %s --check-prefix=MODE-NONE
// MODE-NONE: tpc-opt: error: tp-shard: mode=none distributes nothing; use mode=1d

// Data parallelism: a positive count, within the rank limit with the grid,
// with a mode; ZeRO-1 needs replicas to shard over.
// RUN: not tpc-opt %s --tp-shard="mode=1d grid=2 dp=0" 2>&1 | FileCheck %s --check-prefix=DP-ZERO
// RUN: not tpc-opt %s --tp-shard="mode=1d grid=2 dp=0" 2>&1 | count 1
// DP-ZERO: tpc-opt: error: tp-shard: dp=0 is not a positive number of data-parallel replicas
// RUN: not tpc-opt %s --tp-shard="mode=2d grid=1024x1024 dp=2" 2>&1 | FileCheck %s --check-prefix=DP-RANKS
// DP-RANKS: tpc-opt: error: tp-shard: dp=2 times the grid's ranks is more than 1048576 ranks
// RUN: not tpc-opt %s --tp-shard="mode=1d grid=2 shard-optimizer=true" 2>&1 | FileCheck %s --check-prefix=ZERO-NO-DP
// ZERO-NO-DP: tpc-opt: error: tp-shard: shard-optimizer=true shards over the data-parallel axis; it needs dp=N with N > 1
// RUN: not tpc-opt %s --tp-pipeline="dp=2" 2>&1 | FileCheck %s --check-prefix=DP-NO-MODE
// DP-NO-MODE: tpc-opt: error: tp-pipeline: dp=2 needs a mode, e.g. mode=1d (grid=1 for data parallelism alone)
// RUN: not tpc-opt %s --tp-shard="mode=1d dp=x" 2>&1 | FileCheck %s --check-prefix=DP-WORD
// DP-WORD: tpc-opt: for the --dp option: 'x' value invalid for long argument!

// tp-pipeline: a grid or sequence parallelism without a mode is an error,
// not silently dropped.
// RUN: not tpc-opt %s --tp-pipeline=grid=4 2>&1 | FileCheck %s --check-prefix=PIPE-GRID
// RUN: not tpc-opt %s --tp-pipeline=grid=4 2>&1 | count 1
// PIPE-GRID: tpc-opt: error: tp-pipeline: grid=4 needs a mode, e.g. mode=1d
// RUN: not tpc-opt %s --tp-pipeline="mode=none seq-parallel=true" 2>&1 | FileCheck %s --check-prefix=PIPE-SP
// PIPE-SP: tpc-opt: error: tp-pipeline: seq-parallel=true needs a mode, e.g. mode=1d
// RUN: not tpc-opt %s --tp-pipeline="mode=1d grid=2x2" 2>&1 | FileCheck %s --check-prefix=PIPE-GRID-1D
// PIPE-GRID-1D: tpc-opt: error: tp-pipeline: mode=1d needs a one-axis grid, got grid=2x2
// The old spelling is gone.
// RUN: not tpc-opt %s --tp-pipeline="mode=1d grid=2 seq_parallel=true" 2>&1 | FileCheck %s --check-prefix=PIPE-OLD
// PIPE-OLD: no such option seq_parallel

// RUN: not tpc-opt %s --tp-autodiff=remat=sometimes 2>&1 | FileCheck %s --check-prefix=REMAT
// RUN: not tpc-opt %s --tp-autodiff=remat=sometimes 2>&1 | count 1
// REMAT: tpc-opt: for the --remat option: Cannot find option named 'sometimes'!

// The options round-trip through the pipeline's textual form.
// RUN: tpc-opt %s --tp-shard="mode=1d grid=2" --dump-pass-pipeline 2>&1 >/dev/null | FileCheck %s --check-prefix=PRINT
// PRINT: Pass Manager with 1 passes:
// PRINT-NEXT: builtin.module(
// PRINT-NEXT: tp-shard{dp=1 grid=2 microbatches=0 mode=1d seq-parallel=false shard-optimizer=false shard-whole-dims-only=false}
// PRINT-NOT: Pass Manager

// Sequence parallelism needs a sequence to split.
// RUN: not tpc-opt %s --tp-shard="seq-parallel=true" 2>&1 | FileCheck %s --check-prefix=SP-NO-TOKENS
// SP-NO-TOKENS: error: tp-shard: seq-parallel=true needs a function with a tp.input = "tokens" argument to find the sequence


// A pass error on the module is one line with its source line, not a dump of
// the module (--mlir-print-op-on-diagnostic brings that back).
// RUN: not tpc-opt %s --tp-autodiff 2>&1 | FileCheck %s --check-prefix=NO-DUMP
// RUN: not tpc-opt %s --tp-autodiff 2>&1 | count 3
// NO-DUMP: options.mlir:[[# @LINE + 4]]:1: error: tp-autodiff: the module has no @loss
// RUN: not tpc-opt %s --tp-autodiff --mlir-print-op-on-diagnostic 2>&1 | FileCheck %s --check-prefix=DUMP
// DUMP: note: see current operation

module {
}
