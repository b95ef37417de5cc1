#include "support/chi_square.h"

#include <cmath>

namespace ds::testing {

namespace {

// Regularised lower incomplete gamma P(a, x) by its series; upper Q(a, x) by a continued fraction.
double lower_gamma_series(double a, double x) {
    double term = 1.0 / a;
    double sum = term;
    for (int n = 1; n < 100000; ++n) {
        term *= x / (a + n);
        sum += term;
        if (std::fabs(term) < std::fabs(sum) * 1e-15) break;
    }
    return sum * std::exp(-x + a * std::log(x) - std::lgamma(a));
}

double upper_gamma_fraction(double a, double x) {
    const double tiny = 1e-300;
    double b = x + 1.0 - a;
    double c = 1.0 / tiny;
    double d = 1.0 / b;
    double h = d;
    for (int i = 1; i < 100000; ++i) {
        const double an = -i * (i - a);
        b += 2.0;
        d = an * d + b;
        if (std::fabs(d) < tiny) d = tiny;
        c = b + an / c;
        if (std::fabs(c) < tiny) c = tiny;
        d = 1.0 / d;
        const double delta = d * c;
        h *= delta;
        if (std::fabs(delta - 1.0) < 1e-15) break;
    }
    return std::exp(-x + a * std::log(x) - std::lgamma(a)) * h;
}

}  // namespace

double chi_square_p_value(double statistic, int dof) {
    if (dof <= 0) return 1.0;
    if (statistic <= 0.0) return 1.0;
    const double a = dof / 2.0;
    const double x = statistic / 2.0;
    return x < a + 1.0 ? 1.0 - lower_gamma_series(a, x) : upper_gamma_fraction(a, x);
}

chi_square_result chi_square_test(const std::vector<int64_t>& observed, const std::vector<double>& expected) {
    chi_square_result result;
    int64_t total = 0;
    for (int64_t o : observed) total += o;
    double pooled_expected = 0.0;
    int64_t pooled_observed = 0;
    int cells = 0;
    for (size_t i = 0; i < observed.size(); ++i) {
        const double e = expected[i] * static_cast<double>(total);
        if (expected[i] == 0.0) {
            result.unexpected += observed[i];
            continue;
        }
        if (e < 5.0) {
            pooled_expected += e;
            pooled_observed += observed[i];
            continue;
        }
        const double diff = static_cast<double>(observed[i]) - e;
        result.statistic += diff * diff / e;
        ++cells;
    }
    if (pooled_expected > 0.0) {
        const double diff = static_cast<double>(pooled_observed) - pooled_expected;
        result.statistic += diff * diff / pooled_expected;
        ++cells;
    }
    result.dof = cells - 1;
    result.p_value = chi_square_p_value(result.statistic, result.dof);
    return result;
}

}  // namespace ds::testing
