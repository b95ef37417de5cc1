#include "config/json_input.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <map>
#include <vector>

namespace ds {

namespace {

using json = nlohmann::json;
// The lexer of this type reads numbers as long double, so 1e400 arrives as a number the handler
// can keep as text, instead of a parse error without a field name.
using wide_json =
    nlohmann::basic_json<std::map, std::vector, std::string, bool, std::int64_t, std::uint64_t, long double>;

// The subtype of the binary values that stand for overflowed numbers (no JSON text makes a binary).
constexpr std::uint8_t kOverflowSubtype = 0x7e;

// Builds a json DOM from SAX events, refusing what the header says, iteratively.
class bounded_dom_builder {
   public:
    explicit bounded_dom_builder(json& root) : root_(root) {}

    bool null() { return add(json(nullptr)); }
    bool boolean(bool value) { return add(json(value)); }
    bool number_integer(std::int64_t value) { return add(json(value)); }
    bool number_unsigned(std::uint64_t value) { return add(json(value)); }
    bool number_float(long double value, const std::string& text) {
        if (std::fabs(value) <= static_cast<long double>(std::numeric_limits<double>::max()))
            return add(json(static_cast<double>(value)));
        return add(overflow_marker(text));
    }
    bool string(std::string& value) { return add(json(std::move(value))); }
    bool binary(wide_json::binary_t&) { return fail("binary values are not JSON"); }
    bool start_object(std::size_t) { return open(json::object()); }
    bool key(std::string& key) {
        if (open_.back()->contains(key)) {
            keys_.back().clear();  // the error is the object's
            return fail(fmt::format("duplicate key {}", quote_json(json(key))));
        }
        keys_.back() = std::move(key);
        return true;
    }
    bool end_object() { return close(); }
    bool start_array(std::size_t) { return open(json::array()); }
    bool end_array() { return close(); }
    bool parse_error(std::size_t position, const std::string& token, const nlohmann::detail::exception& e) {
        const std::string what = e.what();
        if (what.find("number overflow") != std::string::npos)
            return fail(fmt::format("{} is beyond the range of any number", shorten(token)));
        const std::size_t detail = what.find("syntax error");
        return fail(fmt::format("not valid JSON at byte {} ({})", position,
                                detail == std::string::npos ? what : what.substr(detail)));
    }

    const std::string& error() const { return error_; }

   private:
    static json overflow_marker(const std::string& text) {
        return json::binary(json::binary_t::container_type(text.begin(), text.end()), kOverflowSubtype);
    }

    // The value being read: "requests[3].top_p"; "" for the document itself. Cut after
    // kMaxQuoteChars characters (a deep path is mostly "[0]").
    std::string path() const {
        std::string out;
        for (std::size_t i = 0; i < open_.size(); ++i) {
            const bool innermost = i + 1 == open_.size();
            if (open_[i]->is_array()) {
                // An inner array holds the container being read; the innermost one is reading its next entry.
                out += fmt::format("[{}]", innermost ? open_[i]->size() : open_[i]->size() - 1);
            } else if (!keys_[i].empty()) {
                out += fmt::format("{}{}", out.empty() ? "" : ".", keys_[i]);
            }
            if (out.size() > kMaxQuoteChars) return out.substr(0, kMaxQuoteChars) + "...";
        }
        return out;
    }

    bool fail(const std::string& what) {
        const std::string where = path();
        error_ = where.empty() ? what : fmt::format("{}: {}", where, what);
        return false;
    }

    // Places a finished value (or a container about to be filled) in its container or as the document.
    json* place(json&& value) {
        if (open_.empty()) {
            root_ = std::move(value);
            return &root_;
        }
        json& container = *open_.back();
        if (container.is_array()) {
            container.push_back(std::move(value));
            return &container.back();
        }
        json& slot = container[keys_.back()];
        slot = std::move(value);
        return &slot;
    }

    bool add(json&& value) {
        place(std::move(value));
        return true;
    }

    bool open(json&& container) {
        if (static_cast<int>(open_.size()) >= kMaxJsonDepth)
            return fail(fmt::format("nested deeper than {} levels", kMaxJsonDepth));
        open_.push_back(place(std::move(container)));
        keys_.emplace_back();
        return true;
    }

    bool close() {
        open_.pop_back();
        keys_.pop_back();
        return true;
    }

    json& root_;
    std::vector<json*> open_;        // the containers being filled, outermost first
    std::vector<std::string> keys_;  // per container: the last key read (objects)
    std::string error_;
};

}  // namespace

result<json> parse_json(std::string_view text) {
    json root;
    bounded_dom_builder builder(root);
    if (!wide_json::sax_parse(text.begin(), text.end(), &builder))
        return status::invalid(builder.error().empty() ? "not valid JSON" : builder.error());
    return root;
}

result<json> read_json(std::istream& in) {
    const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    return parse_json(text);
}

bool is_overflowed_number(const json& value) {
    return value.is_binary() && value.get_binary().has_subtype() && value.get_binary().subtype() == kOverflowSubtype;
}

std::string quote_json(const json& value) {
    switch (value.type()) {
        case json::value_t::array: return fmt::format("an array of {} entries", value.size());
        case json::value_t::object: return fmt::format("an object of {} keys", value.size());
        case json::value_t::string: {
            const std::string& text = value.get_ref<const std::string&>();
            if (text.size() <= kMaxQuoteChars) return json(text).dump();
            return fmt::format("{}... ({} characters)", json(text.substr(0, kMaxQuoteChars)).dump(), text.size());
        }
        case json::value_t::number_float: return format_number(value.get<double>());
        case json::value_t::binary: {
            const json::binary_t& bytes = value.get_binary();
            return shorten(std::string(bytes.begin(), bytes.end()));
        }
        default: return value.dump();
    }
}

std::string quote_text(std::string_view text) {
    if (text.size() <= kMaxQuoteChars) return fmt::format("'{}'", text);
    return fmt::format("'{}'... ({} characters)", text.substr(0, kMaxQuoteChars), text.size());
}

std::string shorten(std::string_view text) {
    if (text.size() <= kMaxQuoteChars) return std::string(text);
    return fmt::format("{}... ({} characters)", text.substr(0, kMaxQuoteChars), text.size());
}

std::string format_number(double value) { return fmt::format("{}", value); }

}  // namespace ds
