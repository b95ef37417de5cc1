// Pearson's chi-square goodness-of-fit test for the sampling statistics tests.
#pragma once

#include <cstdint>
#include <vector>

namespace ds::testing {

// P(X >= statistic) for X ~ chi-square with `dof` degrees of freedom.
double chi_square_p_value(double statistic, int dof);

struct chi_square_result {
    double statistic = 0.0;
    int dof = 0;
    double p_value = 1.0;
    int64_t unexpected = 0;  // draws that landed where the expected probability is 0
};

// Compares observed counts with expected probabilities (summing to 1). Cells with expected count
// below 5 are pooled into one cell.
chi_square_result chi_square_test(const std::vector<int64_t>& observed, const std::vector<double>& expected);

}  // namespace ds::testing
