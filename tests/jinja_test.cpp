// The jinja engine and ChatTemplate. The rendering cases come from tests/jinja/cases.json,
// whose expected outputs Python's jinja2 wrote (tests/jinja/make_cases.py; the conformance
// test re-checks them against jinja2); the rest checks the API: errors, globals, loading.
#include <gtest/gtest.h>

#include <pthread.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "core/files.h"
#include "sanitized.h"
#include "chat/chat_template.h"
#include "chat/jinja/jinja.h"

namespace {

using linnet::ChatRequest;
using linnet::ChatTemplate;
using namespace linnet::jinja;
using ojson = nlohmann::ordered_json;
namespace fs = std::filesystem;

// make_cases.py's NOW (2026-01-15 10:30:00), read in UTC.
std::time_t fixed_now() {
  setenv("TZ", "UTC", 1);
  tzset();
  std::tm tm{};
  tm.tm_year = 2026 - 1900;
  tm.tm_mon = 0;
  tm.tm_mday = 15;
  tm.tm_hour = 10;
  tm.tm_min = 30;
  return timegm(&tm);
}

std::string render(std::string_view source, const ojson& context = ojson::object(), Options options = {}) {
  std::time_t now = fixed_now();
  return Template::parse(source, options).render(context, {{"strftime_now", strftime_now_function([now] { return now; })}});
}

const Options kHf{.trim_blocks = true, .lstrip_blocks = true};

struct Case {
  std::string name;
  ojson data;
};

std::vector<Case> load_cases() {
  std::string path = std::string(LINNET_JINJA_SOURCE_DIR) + "/tests/jinja/cases.json";
  ojson all = ojson::parse(linnet::read_text_file(path, "jinja cases"));
  std::vector<Case> out;
  for (const auto& c : all) out.push_back({c["name"].get<std::string>(), c});
  return out;
}

class JinjaCase : public ::testing::TestWithParam<Case> {};

TEST_P(JinjaCase, RendersAsJinja2) {
  const ojson& c = GetParam().data;
  Options options;
  if (c.contains("options")) {
    const ojson& o = c["options"];
    options.trim_blocks = o.value("trim_blocks", false);
    options.lstrip_blocks = o.value("lstrip_blocks", false);
    options.keep_trailing_newline = o.value("keep_trailing_newline", false);
  }
  std::string source = c["template"].get<std::string>();
  ojson context = c.value("context", ojson::object());
  if (c.contains("expected")) {
    std::string got;
    try {
      got = render(source, context, options);
    } catch (const std::exception& e) {
      FAIL() << "refused: " << e.what();
    }
    EXPECT_EQ(got, c["expected"].get<std::string>());
    return;
  }
  std::string kind = c["error"].get<std::string>();
  if (kind == "syntax") EXPECT_THROW(render(source, context, options), TemplateError);
  else if (kind == "raise") EXPECT_THROW(render(source, context, options), RaiseError);
  else EXPECT_THROW(render(source, context, options), RenderError);
}

INSTANTIATE_TEST_SUITE_P(Cases, JinjaCase, ::testing::ValuesIn(load_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

std::string error_of(std::string_view source, const ojson& context = ojson::object()) {
  try {
    render(source, context);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

std::string error_of_render(const Template& t, const ojson& context, const Limits& limits) {
  try {
    t.render(context, {}, limits);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Jinja, SyntaxErrorsNameLineAndColumn) {
  EXPECT_EQ(error_of("one\ntwo {{ 1 + }}"), "line 2, column 12: unexpected 'end of print statement'");
  EXPECT_EQ(error_of("{% if x %}\n{% endfor %}"), "line 2, column 4: Encountered unknown tag 'endfor'.");
  EXPECT_EQ(error_of("a\n\n  {{ x | nope }}"), "line 3, column 10: No filter named 'nope'.");
  EXPECT_EQ(error_of("{% for x in y %}"),
            "line 1, column 17: Unexpected end of template. Jinja was looking for the following tags: 'else' or 'endfor'.");
  EXPECT_EQ(error_of("{{ 'open }}"), "line 1, column 4: unexpected char \"'\" at 3");
  EXPECT_EQ(error_of("{# never closed"), "line 1, column 1: Missing end of comment tag");
  // Integer literals past 64 bits, decimal or prefixed (before: a prefixed one overflowed, UB
  // that fuzz_chat_template found: tests/fuzz/regressions/fuzz_chat_template/).
  EXPECT_EQ(error_of("{{ 99999999999999999999 }}"), "line 1, column 4: integer literal out of range: 99999999999999999999");
  EXPECT_EQ(error_of("{{ 0o1000000000000000000000 }}"),
            "line 1, column 4: integer literal out of range: 0o1000000000000000000000");
  EXPECT_EQ(error_of("{{ 0x7fffffffffffffff }}"), "(no error)");
  EXPECT_EQ(error_of("{{ 0x8000000000000000 }}"), "line 1, column 4: integer literal out of range: 0x8000000000000000");
  // A float literal past the range is inf (or 0), as Python's float() reads it (before: an
  // uncaught std::out_of_range).
  EXPECT_EQ(render("{{ 5e9999999 }} {{ -1e999 }} {{ 1e-999 }}"), "inf -inf 0.0");
}

// A slice inside a tuple subscript (x[::, 1]) is undefined, as jinja2 gives it (before: the
// slice was left without its object and evaluating it read a null pointer — UB that
// fuzz_chat_template found: tests/fuzz/regressions/fuzz_chat_template/).
TEST(Jinja, ASliceInATupleSubscriptIsUndefined) {
  EXPECT_EQ(render("{{ [1, 2][::, 1] }}|"), "|");
  EXPECT_EQ(render("{{ 'ab'[1:, 0] is defined }}"), "False");
  EXPECT_EQ(render("{{ {'a': 1}[:1, 2] is defined }}"), "False");
  EXPECT_EQ(error_of("{{ [][::, 1] | tojson }}"), "line 1: Object of type Undefined is not JSON serializable");
}

// Integers are 64-bit: arithmetic past that is an error, never a wrapped number (before:
// signed overflow, UB that fuzz_chat_template found); repetition is bounded.
TEST(Jinja, IntegerOverflowIsAnError) {
  const std::string big = "9223372036854775807";
  EXPECT_EQ(error_of("{{ " + big + " + 1 }}"), "line 1: integer overflow in +: template integers are 64-bit");
  EXPECT_EQ(error_of("{{ -" + big + " - 2 }}"), "line 1: integer overflow in -: template integers are 64-bit");
  EXPECT_EQ(error_of("{{ 4294967296 * 4294967296 }}"), "line 1: integer overflow in *: template integers are 64-bit");
  EXPECT_EQ(error_of("{{ 2 ** 63 }}"), "line 1: integer overflow in **: template integers are 64-bit");
  EXPECT_EQ(render("{{ 2 ** 62 }} {{ (-2) ** 63 }} {{ 3 ** 39 }}"), "4611686018427387904 -9223372036854775808 4052555153018976267");
  EXPECT_EQ(error_of("{{ (-" + big + " - 1) // -1 }}"), "line 1: integer overflow in //: template integers are 64-bit");
  EXPECT_EQ(render("{{ (-" + big + " - 1) % -1 }} {{ 7 % -1 }}"), "0 0");
  EXPECT_EQ(error_of("{{ -(-" + big + " - 1) }}"), "line 1: integer overflow in unary -: template integers are 64-bit");
  EXPECT_EQ(error_of("{{ 'ab' * 100000000 }}"), "line 1: the template would make a text of more than 64 MiB (the render limit max_bytes)");
  EXPECT_EQ(render("{{ ('ab' * 3) ~ ([1] * 2) | length }}"), "ababab2");
}

TEST(Jinja, RuntimeErrorsNameTheLine) {
  EXPECT_EQ(error_of("a\nb\n{{ x.y }}"), "line 3: 'x' is undefined");
  EXPECT_EQ(error_of("\n{{ [].append(1) }}"), "line 2: access to attribute 'append' of 'list' object is unsafe.");
  EXPECT_EQ(error_of("{% macro m() %}\n\n{{ 1 + 'a' }}{% endmacro %}\n{{ m() }}"),
            "line 3: unsupported operand type(s) for +: 'int' and 'str'");
}

TEST(Jinja, RaiseExceptionKeepsTheMessage) {
  try {
    render("{{ raise_exception('Roles must alternate') }}");
    FAIL() << "no exception";
  } catch (const RaiseError& e) {
    EXPECT_STREQ(e.what(), "Roles must alternate");
  }
}

TEST(Jinja, ErrorTypesAreLinnetErrors) {
  EXPECT_THROW(render("{% if %}"), linnet::Error);
  EXPECT_THROW(render("{{ x() }}"), linnet::Error);
  EXPECT_THROW(render("{{ raise_exception('no') }}"), linnet::Error);
}

TEST(Jinja, HostFunctions) {
  Globals g = {{"twice", Value::function("twice", [](CallArgs& args) {
                  return Value(args.positional.at(0).str() + args.positional.at(0).str());
                })}};
  EXPECT_EQ(Template::parse("{{ twice('ab') }}").render(ojson::object(), g), "abab");
  // A context variable hides a global of the same name, as jinja2's render kwargs do.
  EXPECT_EQ(Template::parse("{{ twice }}").render({{"twice", 2}}, g), "2");
}

TEST(Jinja, StrftimeNowIsInjectable) {
  EXPECT_EQ(render("{{ strftime_now('%Y-%m-%d %H:%M') }}"), "2026-01-15 10:30");
  // Without an injected clock it formats the real time: at least the year is plausible.
  std::string year = Template::parse("{{ strftime_now('%Y') }}").render(ojson::object());
  EXPECT_GE(std::stoi(year), 2024);
}

TEST(Jinja, ContextValuesKeepJsonTypes) {
  ojson ctx = {{"i", 3}, {"f", 3.0}, {"big", 12345678901234LL}, {"neg", -0.5}, {"b", false}, {"n", nullptr}};
  EXPECT_EQ(render("{{ i }} {{ f }} {{ big }} {{ neg }} {{ b }} {{ n }} {{ i / 2 }} {{ f // 2 }}", ctx),
            "3 3.0 12345678901234 -0.5 False None 1.5 1.0");
}

TEST(Jinja, ATemplateRendersManyTimes) {
  Template t = Template::parse("{% set ns = namespace(n=0) %}{% for x in xs %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }}");
  EXPECT_EQ(t.render({{"xs", {1, 2}}}), "3");
  EXPECT_EQ(t.render({{"xs", {4}}}), "4");
}

TEST(Jinja, DeepRecursionIsAnError) {
  EXPECT_THROW(render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"), RenderError);
}

// ---- ChatTemplate ----

const char* kChatml =
    "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

ChatRequest two_messages() {
  ChatRequest r;
  r.messages = ojson::parse(R"([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}])");
  return r;
}

TEST(ChatTemplate, RendersWithGenerationPrompt) {
  ChatTemplate t = ChatTemplate::single(kChatml, ojson::object());
  ChatRequest r = two_messages();
  EXPECT_EQ(t.render(r), "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nhello<|im_end|>\n");
  r.add_generation_prompt = true;
  EXPECT_EQ(t.render(r), "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nhello<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, PassesSpecialTokensToolsAndKwargs) {
  ChatTemplate t = ChatTemplate::single(
      "{{ bos_token }}|{{ tools is none }}|{{ documents is none }}|{{ enable_thinking }}|{{ eos_token }}",
      {{"bos_token", "<s>"}, {"eos_token", "</s>"}});
  ChatRequest r = two_messages();
  r.kwargs = {{"enable_thinking", false}, {"eos_token", "<|end|>"}};
  EXPECT_EQ(t.render(r), "<s>|True|True|False|<|end|>");
}

TEST(ChatTemplate, DropsNullKeysAndAliasesReasoning) {
  ChatTemplate t = ChatTemplate::single("{% for m in messages %}{{ m | tojson }}\n{% endfor %}", ojson::object());
  ChatRequest r;
  r.messages = ojson::parse(R"([{"role": "assistant", "content": "4", "tool_calls": null, "reasoning": "2+2"}])");
  EXPECT_EQ(t.render(r), R"({"thinking": "2+2", "role": "assistant", "content": "4", "reasoning": "2+2", "reasoning_content": "2+2"})"
                         "\n");
}

TEST(ChatTemplate, ContinuesTheFinalMessage) {
  ChatTemplate t = ChatTemplate::single(kChatml, ojson::object());
  ChatRequest r = two_messages();
  r.continue_final_message = "content";
  EXPECT_EQ(t.render(r), "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nhello");
  r.add_generation_prompt = true;
  EXPECT_THROW(t.render(r), linnet::Error);
  // A template that trims the content: the cut is rstripped.
  ChatTemplate trimmed = ChatTemplate::single("{% for m in messages %}[{{ m.content | trim }}]{% endfor %}", ojson::object());
  r.add_generation_prompt = false;
  r.messages[1]["content"] = "hello ";
  EXPECT_EQ(trimmed.render(r), "[hi][hello");
}

TEST(ChatTemplate, RefusesWhatTransformersRefuses) {
  ChatTemplate t = ChatTemplate::single(kChatml, ojson::object());
  ChatRequest empty;
  EXPECT_THROW(t.render(empty), linnet::Error);
  ChatRequest bad;
  bad.messages = ojson::parse(R"(["not a message"])");
  EXPECT_THROW(t.render(bad), linnet::Error);
}

TEST(ChatTemplate, AParseErrorSurfacesWhenUsed) {
  ChatTemplate t = ChatTemplate::single("{{ x | from_json }}", ojson::object());
  EXPECT_THROW(t.render(two_messages()), TemplateError);
}

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("linnet-jinja-" + std::to_string(::getpid()) + "-" + std::to_string(std::rand()));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  void write(const std::string& name, const std::string& text) const {
    fs::create_directories((path / name).parent_path());
    std::ofstream(path / name) << text;
  }
};

TEST(ChatTemplate, LoadsTheConfigsTemplateAndSpecialTokens) {
  TempDir dir;
  dir.write("tokenizer_config.json", R"({"chat_template": "{{ bos_token }}{{ messages[0].content }}",
      "bos_token": {"__type": "AddedToken", "content": "<|begin|>"}, "eos_token": "<|end|>", "pad_token": null,
      "extra_special_tokens": {"image_token": "<img>"}})");
  ChatTemplate t = ChatTemplate::load(dir.path.string());
  EXPECT_EQ(t.special_tokens(), ojson({{"bos_token", "<|begin|>"}, {"eos_token", "<|end|>"}, {"image_token", "<img>"}}));
  EXPECT_EQ(t.render(two_messages()), "<|begin|>hi");
}

TEST(ChatTemplate, PicksNamedTemplatesAsTransformers) {
  TempDir dir;
  dir.write("tokenizer_config.json",
            R"({"chat_template": [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}]})");
  ChatTemplate t = ChatTemplate::load(dir.path.string());
  ChatRequest r = two_messages();
  EXPECT_EQ(t.render(r), "D");
  r.tools = ojson::array();
  EXPECT_EQ(t.render(r), "T");
  r.template_name = "default";
  EXPECT_EQ(t.render(r), "D");
  r.template_name = "nope";
  EXPECT_THROW(t.render(r), linnet::Error);
}

TEST(ChatTemplate, TemplateFilesReplaceTheConfigs) {
  TempDir dir;
  dir.write("tokenizer_config.json", R"({"chat_template": "config"})");
  dir.write("chat_template.jinja", "file\n");
  EXPECT_EQ(ChatTemplate::load(dir.path.string()).render(two_messages()), "file");  // one trailing newline dropped
  dir.write("additional_chat_templates/tool_use.jinja", "tools file");
  ChatTemplate t = ChatTemplate::load(dir.path.string());
  ChatRequest r = two_messages();
  EXPECT_EQ(t.render(r), "file");
  r.tools = ojson::array();
  EXPECT_EQ(t.render(r), "tools file");
  dir.write("override.jinja", "override");
  EXPECT_EQ(ChatTemplate::load(dir.path.string(), (dir.path / "override.jinja").string()).render(r), "override");
}

TEST(ChatTemplate, NoTemplateIsAnErrorNamingTheFolder) {
  TempDir dir;
  dir.write("tokenizer_config.json", R"({"eos_token": "</s>"})");
  try {
    ChatTemplate::load(dir.path.string());
    FAIL() << "no error";
  } catch (const linnet::Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir.path.string()), std::string::npos) << e.what();
  }
}

}  // namespace

namespace {

TEST(Jinja, HostileNestingIsASyntaxError) {
  EXPECT_THROW(render("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}"), TemplateError);
  std::string blocks;
  for (int i = 0; i < 1000; ++i) blocks += "{% if true %}";
  EXPECT_THROW(render(blocks), TemplateError);
  // Moderate nesting is fine.
  EXPECT_EQ(render("{{ " + std::string(50, '(') + "1" + std::string(50, ')') + " }}"), "1");
}

TEST(Jinja, SelfReferenceInANamespacePrintsAsPython) {
  EXPECT_EQ(render("{% set ns = namespace(a=1) %}{% set ns.me = ns %}{{ ns }}"),
            "<Namespace {'a': 1, 'me': <Namespace {...}>}>");
}

TEST(Jinja, LargeConversationRendersQuickly) {
  ojson messages = ojson::array();
  for (int i = 0; i < 2000; ++i)
    messages.push_back({{"role", i % 2 ? "assistant" : "user"}, {"content", std::string(200, 'x') + std::to_string(i)}});
  Template t = Template::parse(
      "{% for m in messages %}{% if loop.first and m.role != 'system' %}<sys>{% endif %}<|{{ m.role }}|>{{ m.content | trim }}"
      "{% if m.tool_calls is defined %}{{ m.tool_calls | tojson }}{% endif %}{% endfor %}",
      kHf);
  auto start = std::chrono::steady_clock::now();
  std::string out = t.render({{"messages", messages}});
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GT(out.size(), 400000u);
  EXPECT_LT(seconds, 1.0);
}

}  // namespace

// ---- bounds (issue 34, items 5–8) ----

namespace {

using linnet::testing::kSanitized;

// Seconds since start, as an optimized build would have taken them (time bounds are for those).
double seconds_since(std::chrono::steady_clock::time_point start) {
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return s / linnet::testing::kSlowdown;
}

// A JSON object text of n keys "<prefix>0" … with the index as value, after `head` members.
std::string many_keys(const std::string& prefix, int n, const std::string& head = "") {
  std::string s = "{" + head;
  for (int i = 0; i < n; ++i) s += linnet::str(i || !head.empty() ? "," : "", "\"", prefix, i, "\":", i);
  return s + "}";
}

// Dicts and scopes are hashed: 60,000 keys in chat_template_kwargs and in one message render
// in linear time, and the JSON they come in parses in linear time (before: 40,000 kwargs took
// 17.8 s to render, and nlohmann's ordered parser took 4.8 s for 60,000 keys).
TEST(ChatTemplate, ManyKeysRenderInLinearTime) {
  const auto start = std::chrono::steady_clock::now();
  ChatRequest r;
  r.kwargs = linnet::parse_ordered_json(many_keys("k", 60000), "kwargs");
  r.messages = ojson::array();
  r.messages.push_back(linnet::parse_ordered_json(many_keys("m", 60000, R"("role": "user", "content": "hi")"), "message"));
  ChatTemplate t = ChatTemplate::single(
      "{{ k59999 }}{% for m in messages %}|{{ m.content }}|{{ m.m59999 }}|{{ m | length }}|{{ m['m7'] }}"
      "|{{ 'm70' in m }}|{{ m.get('m42') }}{% endfor %}|{{ k7 in messages[0] }}|{{ dict(messages[0]) | length }}",
      ojson::object());
  EXPECT_EQ(t.render(r), "59999|hi|59999|60002|7|True|42|False|60002");
  EXPECT_LT(seconds_since(start), 2.0);
}

TEST(Jinja, OrderedJsonKeepsTheFirstPlaceAndTheLastValueOfARepeatedKey) {
  const ojson j = linnet::parse_ordered_json(R"({"b": 1, "a": {"x": [1, {"y": 2}]}, "b": 3})", "t");
  EXPECT_EQ(j.dump(), R"({"b":3,"a":{"x":[1,{"y":2}]}})");
  EXPECT_THROW(linnet::parse_ordered_json("{\"a\": }", "t"), linnet::Error);
  EXPECT_THROW(linnet::parse_ordered_json(std::string(65, '[') + std::string(65, ']') + "[", "t"), linnet::Error);
}

// 1, 1.0 and True are one key, and an int equals a float only when their values are equal
// (Python compares them exactly: 2**53 + 1 is not 2.0**53).
TEST(Jinja, DictKeysFollowPythonEquality) {
  EXPECT_EQ(render("{{ {1: 'a', 1.0: 'b', True: 'c', 2: 'd'} }}"), "{1: 'c', 2: 'd'}");
  std::string many = "{% set d = {";
  for (int i = 0; i < 20; ++i) many += linnet::str(i ? ", " : "", i, ": ", i);
  EXPECT_EQ(render(many + "} %}{{ d[1.0] }} {{ d[True] }} {{ 19.0 in d }} {{ 19.5 in d }} {{ d | length }}"), "1 1 True False 20");
  EXPECT_EQ(render("{{ 9007199254740993 == 9007199254740992.0 }} {{ 9007199254740993 > 9007199254740992.0 }}"),
            "False True");
  EXPECT_EQ(error_of("{{ [1] in {} }}"), "line 1: unhashable type: 'list'");
  EXPECT_EQ(error_of("{{ {([1], 2): 3} }}"), "line 1: unhashable type: 'list'");
  EXPECT_EQ(error_of("{{ [[1], [1]] | unique | list }}"), "line 1: unhashable type: 'list'");
}

// Runs fn on a thread with a stack of `bytes` (a server may render on small worker stacks);
// a stack overflow would end the test binary.
void on_stack_of(std::size_t bytes, const std::function<void()>& fn) {
  if (kSanitized) bytes *= 8;  // AddressSanitizer's frames are several times larger
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, bytes);
  pthread_t thread;
  auto run = [](void* f) -> void* {
    (*static_cast<const std::function<void()>*>(f))();
    return nullptr;
  };
  ASSERT_EQ(pthread_create(&thread, &attr, run, const_cast<std::function<void()>*>(&fn)), 0);
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
}

constexpr std::size_t kOneMiB = std::size_t{1} << 20;

// A list nested `depth` deep, built by the template (the request's JSON is limited to 64
// levels; a template's own values are not).
std::string nested(int depth, const std::string& then) {
  return linnet::str("{% set ns = namespace(x=[], y=[]) %}{% for i in range(", depth,
                     ") %}{% set ns.x = [ns.x] %}{% set ns.y = [ns.y] %}{% endfor %}", then);
}

// Every recursive walk is bounded as Python's recursion limit bounds jinja2's (RecursionError,
// a 400 on the server): printing, tojson, comparisons, `in`, sorting, hashing and converting
// nested values, macro recursion; values nested 100,000 deep are freed without recursion;
// all on a 1 MiB stack (before: printing a 20,000-deep list overflowed the stack, SIGSEGV).
TEST(Jinja, DeepNestingIsARecursionErrorNotACrash) {
  on_stack_of(kOneMiB, [] {
    const std::string repr = "maximum recursion depth exceeded while getting the repr of an object";
    EXPECT_EQ(error_of(nested(20000, "{{ ns.x }}")), "line 1: " + repr);
    EXPECT_EQ(error_of(nested(20000, "{{ ns.x | string }}")), "line 1: " + repr);
    EXPECT_EQ(error_of(nested(20000, "{{ ns.x | tojson }}")), "line 1: maximum recursion depth exceeded while encoding a JSON object");
    EXPECT_EQ(error_of(nested(20000, "{{ ns.x == ns.y }}")), "line 1: maximum recursion depth exceeded in comparison");
    EXPECT_EQ(error_of(nested(20000, "{{ ns.x in [ns.y] }}")), "line 1: maximum recursion depth exceeded in comparison");
    EXPECT_EQ(error_of(nested(20000, "{{ [ns.x, ns.y] | sort }}")), "line 1: maximum recursion depth exceeded in comparison");
    EXPECT_EQ(render(nested(20000, "{{ ns.x is sameas ns.x }} {{ ns.x == ns.x }}")), "True True");  // no walk: the same object
    EXPECT_EQ(error_of("{% set ns = namespace(t=()) %}{% for i in range(5000) %}{% set ns.t = (ns.t,) %}{% endfor %}{{ {ns.t: 1} }}"),
              "line 1: maximum recursion depth exceeded");
    EXPECT_EQ(error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"), "line 1: maximum recursion depth exceeded");
    // As deep as jinja2 goes (it prints 990 levels), and freeing 100,000 levels.
    EXPECT_EQ(render(nested(990, "{{ (ns.x | string | length) }} {{ ns.x | tojson | length }} {{ ns.x == ns.y }}")), "1982 1982 True");
    EXPECT_EQ(render(nested(100000, "done")), "done");
    // Context JSON deeper than the limit (the server's JSON stops at 64 levels; a caller's may not).
    const ojson deep = ojson::parse(std::string(5000, '[') + std::string(5000, ']'));
    EXPECT_EQ(error_of("{{ x }}", {{"x", deep}}), "the template context: maximum recursion depth exceeded while converting JSON");
  });
}

// Parsing is linear and its recursion bounded: 30,000 parentheses are refused at once (before:
// 22 s of quadratic work first), a chain of 200,000 operators and a 4 MB template are quick.
TEST(Jinja, ParsingIsLinearAndItsRecursionBounded) {
  on_stack_of(kOneMiB, [] {
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(error_of("{{ " + std::string(30000, '(') + "1" + std::string(30000, ')') + " }}"),
              "line 1, column 103: the template nests deeper than 100 levels");
    EXPECT_EQ(error_of("{{ " + std::string(30000, '[') + std::string(30000, ']') + " }}"),
              "line 1, column 103: the template nests deeper than 100 levels");
    std::string nots, chain = "{{ 1", elses = "{{ 1", filters = "{{ 'a'", dots = "{{ x";
    for (int i = 0; i < 50000; ++i) {
      nots += "not ";
      chain += " + 1";
      elses += " if x else 1";
      filters += " | lower";
      dots += ".a";
    }
    EXPECT_EQ(error_of("{{ " + nots + "1 }}"), "line 1, column 400: the template nests deeper than 100 levels");
    EXPECT_EQ(error_of(chain + " }}"), "line 1, column 2006: the expression nests deeper than 500 levels");
    EXPECT_EQ(error_of(elses + " }}"), "line 1, column 1192: the template nests deeper than 100 levels");
    EXPECT_EQ(error_of(filters + " }}"), "line 1, column 4008: the expression nests deeper than 500 levels");
    EXPECT_EQ(error_of(dots + " }}"), "line 1, column 1005: the expression nests deeper than 500 levels");
    std::string ifs;
    for (int i = 0; i < 1000; ++i) ifs += "{% if true %}";
    EXPECT_EQ(error_of(ifs), "line 1, column 1294: the template nests deeper than 100 levels");
    // As deep as real templates go, and more.
    EXPECT_EQ(render("{{ " + std::string(60, '(') + "1" + std::string(60, ')') + " }}"), "1");
    std::string sum = "{{ 0";
    for (int i = 0; i < 400; ++i) sum += " + 1";
    EXPECT_EQ(render(sum + " }}"), "400");
    EXPECT_LT(seconds_since(start), 1.0);
  });
  // A 4 MB template of text, and one of 500,000 tags on a single line: linear time.
  std::string text, tags;
  for (int i = 0; i < 100000; ++i) text += "plain text, line " + std::to_string(i) + " of many.\n";
  for (int i = 0; i < 500000; ++i) tags += "{{ 1 }}";
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(Template::parse(text, kHf).render(ojson::object()).size(), text.size() - 1);  // the last newline dropped
  EXPECT_EQ(Template::parse(tags, kHf).render(ojson::object()), std::string(500000, '1'));
  EXPECT_LT(seconds_since(start), 2.0);
}

// One bound on the text a render makes, one on its steps (Limits): every way of growing
// text or lists fails fast, before the memory is taken, naming the limit (before: only `*`
// was bounded; indent(10**9) took 8.6 GB in 15 s).
TEST(Jinja, RendersAreBoundedInBytesAndSteps) {
  const std::string text = "the template would make a text of more than 64 MiB (the render limit max_bytes)";
  const std::string big = "{% set s = 'x' * 40000000 %}";
  const auto start = std::chrono::steady_clock::now();
  for (const std::string& t : std::vector<std::string>{
           "{{ 'a\nb' | indent(10**9) }}", "{{ 'a' | indent(10**9, true) }}", "{{ 'x' | center(10**9) }}",
           "{{ 'x'.ljust(10**9) }}", "{{ 'x'.rjust(10**9, '-') }}", "{{ 'x'.center(10**9) }}", "{{ 'x'.zfill(10**9) }}",
           "{{ '{:>1000000000}'.format(1) }}", "{{ '{:.1000000000f}'.format(1.5) }}", "{{ '%1000000000d' % 1 }}",
           "{{ '%-1000000000s|' | format('x') }}", "{{ [1] | tojson(indent=10**9) }}", "{{ 'ab' * 10**9 }}",
           "{{ 'x' * 2**62 }}", "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
           "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
           big + "{{ s ~ s }}", big + "{{ s + s }}", big + "{{ [s, s] | join }}", big + "{{ ''.join([s, s]) }}",
           big + "{{ s }}{{ s }}", big + "{{ [s, s] }}", big + "{{ [s, s] | tojson }}", big + "{{ {'a': s, 'b': s} }}",
           big + "{{ s.replace('x', 'xy') }}", big + "{{ s | replace('x', 'xy') }}", big + "{{ '%s%s' % (s, s) }}",
           big + "{{ '{}{}'.format(s, s) }}", "{{ ('x' * 1000000).replace('', 'abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789') }}",
           "{{ ('<' * 20000000) | e }}", "{{ strftime_now('%Y' * 20000000) }}", big + "{% macro m() %}{{ s }}{{ s }}{% endmacro %}{{ m() }}",
           big + "{% set t %}{{ s }}{{ s }}{% endset %}", big + "{% filter upper %}{{ s }}{{ s }}{% endfilter %}"}) {
    const auto one = std::chrono::steady_clock::now();
    const std::string e = error_of(t);
    EXPECT_NE(e.find(text), std::string::npos) << t << "\n" << e;
    EXPECT_LT(seconds_since(one), 2.0) << t;  // refused before the work, not after (a loaded machine: generous)
  }
  const std::string list = "(the render limit max_bytes; an item takes " + std::to_string(sizeof(Value)) + " bytes)";
  for (const std::string t : {"{{ [1] * 10**9 }}", "{{ ([1] * 600000) + ([1] * 600000) }}", "{{ ('x' * 1000000) | list | length }}",
                              "{% for c in 'x' * 1000000 %}{% endfor %}", "{{ [1] | batch(10**9, 0) | list }}",
                              "{{ (',' * 1000000).split(',') | length }}", "{{ (' x' * 1000000).split() | length }}",
                              "{{ ('\n' * 1000000).splitlines() | length }}", "{{ (',' * 1000000).rsplit(',', 999999) | length }}"}) {
    const std::string e = error_of(t);
    EXPECT_NE(e.find(list), std::string::npos) << t << "\n" << e;
  }
  // Steps: nested loops with nothing to print, and a loop that builds a long list quadratically.
  const std::string steps = "the template ran past 20000000 steps (the render limit max_steps)";
  EXPECT_EQ(error_of("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}"), "line 1: " + steps);
  EXPECT_EQ(error_of("{% set ns = namespace(l=[]) %}{% for a in range(100000) %}{% set ns.l = ns.l + [a] %}{% endfor %}"),
            "line 1: " + steps);
  EXPECT_LT(seconds_since(start), 30.0);
  // Chosen limits.
  Template text_of = Template::parse("{{ 'ab' * n }}"), loop = Template::parse("{% for i in range(n) %}{% endfor %}");
  const Limits small{.max_bytes = 6, .max_steps = 100, .cancelled = {}};
  EXPECT_EQ(text_of.render({{"n", 3}}, {}, small), "ababab");
  EXPECT_EQ(error_of_render(text_of, {{"n", 4}}, small),
            "line 1: the template would make a text of more than 6 bytes (the render limit max_bytes)");
  EXPECT_EQ(error_of_render(loop, {{"n", 30}}, Limits{.max_bytes = 1 << 20, .max_steps = 100, .cancelled = {}}),
            "line 1: the template ran past 100 steps (the render limit max_steps)");
}

// A render can be cancelled (a client that went away): the check is called every 4,096 steps
// and a true ends the render with jinja::Cancelled (before: the work went on).
TEST(Jinja, ARenderCanBeCancelled) {
  Template t = Template::parse("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}");
  int calls = 0;
  Limits limits;
  limits.cancelled = [&calls] { return ++calls == 3; };
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(t.render(ojson::object(), {}, limits), Cancelled);
  EXPECT_EQ(calls, 3);
  EXPECT_LT(seconds_since(start), 0.5);
  // A cancelled render is a RenderError, so callers that know only those still stop.
  limits.cancelled = [] { return true; };
  EXPECT_THROW(t.render(ojson::object(), {}, limits), RenderError);
  // Through ChatTemplate.
  ChatTemplate chat = ChatTemplate::single(
      "{% for m in messages %}{% for a in range(100000) %}{{ m.content[:0] }}{% endfor %}{% endfor %}", ojson::object());
  EXPECT_THROW(chat.render(two_messages(), limits), Cancelled);
  EXPECT_EQ(chat.render(two_messages()), "");
}

// Numbers and strings as Python's, or an error where Python's answer is beyond what template
// values hold (ints past 64 bits, complex numbers): never a wrapped or made-up number (before:
// (-2**63)|abs wrapped, 1e30|int gave -2**63, 0 ** -1 and 10.0 ** 400 gave inf, 'ß'|upper gave
// 'ẞ', 'İ'|lower had length 1 and a lone surrogate length 3, a long strftime_now format gave '').
// tests/jinja/make_cases.py has the cases whose answers Python's jinja2 gives.
TEST(Jinja, NumbersAreAsPythonsOrAnError) {
  const std::string min = "(-9223372036854775807 - 1)", bits = ": template integers are 64-bit";
  EXPECT_EQ(error_of("{{ " + min + " | abs }}"), "line 1: integer overflow in abs" + bits);
  EXPECT_EQ(error_of("{{ 1e30 | int }}"), "line 1: integer overflow in int(1e+30)" + bits);
  EXPECT_EQ(error_of("{{ '1e30' | int }}"), "line 1: integer overflow in int(1e+30)" + bits);
  EXPECT_EQ(error_of("{{ x | int }}", {{"x", 1e19}}), "line 1: integer overflow in int(1e+19)" + bits);
  EXPECT_EQ(error_of("{{ '99999999999999999999' | int }}"), "line 1: integer overflow in int('99999999999999999999')" + bits);
  EXPECT_EQ(error_of("{{ '%d' % 1e30 }}"), "line 1: integer overflow in int(1e+30)" + bits);
  EXPECT_EQ(error_of("{{ " + min + " // -1 }}"), "line 1: integer overflow in //" + bits);
  EXPECT_EQ(error_of("{{ 2 ** 63 }}"), "line 1: integer overflow in **" + bits);
  EXPECT_EQ(error_of("{{ 9223372036854775807 | round(-1) }}"), "line 1: integer overflow in round" + bits);
  EXPECT_EQ(error_of("{{ x }}", {{"x", 18446744073709551615ULL}}),
            "the template context: integer 18446744073709551615 is out of range" + bits);
  EXPECT_EQ(error_of("{{ 0 ** -1 }}"), "line 1: 0.0 cannot be raised to a negative power");
  EXPECT_EQ(error_of("{{ 10.0 ** 400 }}"), "line 1: (34, 'Numerical result out of range')");
  EXPECT_EQ(error_of("{{ (-8) ** 0.5 }}"),
            "line 1: a negative number to a fractional power is a complex number, which templates do not have");
  EXPECT_EQ(error_of("{{ 'inf' | float | int }}"), "line 1: cannot convert float infinity to integer");
  EXPECT_EQ(render("{{ 'inf' | int(7) }} {{ 'nan' | float | int(7) }} {{ 7.0 / 2 }} {{ 9223372036854775807 / 3 }}"),
            "7 7 3.5 3.0744573456182584e+18");
  EXPECT_EQ(render("{{ 'ß' | upper }} {{ 'İ' | lower | length }} {{ '\\ud800' | length }} {{ 'ΑΣ ΣΑΣ' | lower }}"),
            "SS 2 1 ας σας");
  EXPECT_EQ(error_of("{{ '\\U00110000' }}"), "line 1, column 4: illegal Unicode character");
  EXPECT_EQ(render("{{ strftime_now('%Y' * 100000) | length }} [{{ strftime_now('%z%Z%f') }}]"), "400000 [000000]");
}

}  // namespace
