#include "tokenizer/jinja.h"

#include "tokenizer/jinja_ast.h"

namespace kestrel::jinja {

Result<Template> Template::parse(const std::string& source) {
  try {
    Template t;
    t.root_ = parse_template(source);
    return t;
  } catch (const std::exception& e) {
    return Error{e.what()};
  }
}

Result<std::string> Template::render(const nlohmann::ordered_json& context) const {
  try {
    std::string out;
    render_template(*root_, context, out);
    return out;
  } catch (const std::exception& e) {
    return Error{e.what()};
  }
}

}  // namespace kestrel::jinja
