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

/// One bar of a timeline: `group` (a job) holds rows row..row+rows-1 (rank
/// slots) from `start` to `end` seconds; `label` is written on it where it
/// fits and in its tooltip.
struct TimelineBar {
  std::string group, label;
  int row = 0, rows = 1;
  double start = 0, end = 0;
};

/// Writes a Gantt chart of `bars` over `rows` rows as SVG, atomically:
/// time on x (seconds), one row per rank slot on y, one colour per group
/// with a legend, bars as <rect class="bar" data-group=...>. Throws
/// std::invalid_argument for a bar outside the rows or ending before it
/// starts, std::runtime_error("<path>: ...") if it cannot write.
void writeTimelineSvg(const std::string &path,
                      const std::vector<TimelineBar> &bars, int rows,
                      const std::string &title);

} // namespace tpc::tools
