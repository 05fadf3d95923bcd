#include <gtest/gtest.h>

#include "tokenizer/jinja/jinja.h"

using namespace linnet::jinja;

TEST(Jinja, Smoke) {
  EXPECT_EQ(Template::parse("Hello {{ name }}!").render({{"name", "world"}}), "Hello world!");
}
