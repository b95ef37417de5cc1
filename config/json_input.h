// The one reader of JSON that comes from outside the process: the stdin of `distsample kernel`,
// `step` and `coordinator`, and configuration files. It refuses, while parsing and naming where
// (the path of the value, e.g. "requests[3].logit_bias"):
//   - nesting deeper than kMaxJsonDepth: no deep tree is ever built, so neither copying, comparing
//     nor printing a document can exhaust the stack (nlohmann's printer and copy recurse);
//   - a key that appears twice in one object (the JSON library would keep the last one silently).
// A number beyond the range of a double (1e400) does not end the parse with a library message:
// it becomes an overflow marker that carries its text, which every field reader refuses as "not a
// number" naming the field and its range, and which quote_json prints as written.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <istream>
#include <string>
#include <string_view>

#include "core/status.h"

namespace ds {

// Deep enough for every document distsample reads (a step is 4 levels deep, a config file 3).
constexpr int kMaxJsonDepth = 64;
// The most characters of a value an error line quotes.
constexpr std::size_t kMaxQuoteChars = 48;

// Parses one JSON document. The error says where and what ("requests[0]: nested deeper than 64
// levels", "not valid JSON at byte 7 (...)"); callers say which input it was.
result<nlohmann::json> parse_json(std::string_view text);
// Reads `in` to its end, then parse_json.
result<nlohmann::json> read_json(std::istream& in);

// Is `value` a number beyond the range of a double (kept as its text, see above)?
bool is_overflowed_number(const nlohmann::json& value);

// A short quote of `value` for an error line (at most about kMaxQuoteChars characters): scalars as
// JSON (numbers with all their digits), long strings cut with their length, arrays and objects by
// their size.
std::string quote_json(const nlohmann::json& value);
// The same for text from the environment or the command line, in single quotes.
std::string quote_text(std::string_view text);
// `text` itself when short, else its first kMaxQuoteChars characters and its length: for names
// that appear unquoted in a message (a key, a field path).
std::string shorten(std::string_view text);

// Enough digits to tell the value from its neighbours (the shortest text that reads back the
// same): 1e-50, not 0.
std::string format_number(double value);

}  // namespace ds
