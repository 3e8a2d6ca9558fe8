// Loss-curve plots as self-contained SVG files.
#pragma once

#include "tpc/runtime/Training.h"

#include <cstdint>
#include <string>
#include <vector>

namespace tpc::tools {

/// Writes an SVG line chart of loss against step, atomically (temp file +
/// rename): gridlines and tick labels on both axes, the axis titles "step"
/// and "loss", `title` on top, the raw loss as a thin polyline
/// (class="loss", one point per finite loss) and, from 5 points on, a
/// centred moving average (class="smoothed"). NaN and infinite losses are
/// skipped; a single point is also drawn as a dot; a constant loss gets a
/// small range around it; with no finite loss the axes carry a note.
/// A held-out loss (`evalSteps`, `evalLosses`; may be empty) is a second
/// polyline (class="validation") with a dot per evaluation, in the ranges
/// and the legend. Throws std::invalid_argument if paired vectors differ in
/// length and std::runtime_error("<path>: ...") if the file cannot be
/// written.
void writeLossCurveSvg(const std::string &path,
                       const std::vector<int64_t> &steps,
                       const std::vector<double> &losses,
                       const std::string &title,
                       const std::vector<int64_t> &evalSteps = {},
                       const std::vector<double> &evalLosses = {});

/// A training run's loss curve (the finite losses: a run stopped by a NaN
/// ends before it) and its held-out losses, if any.
void writeTrainingCurvesSvg(const std::string &path,
                            const runtime::TrainResult &result);

} // namespace tpc::tools
