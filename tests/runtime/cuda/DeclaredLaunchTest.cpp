// The launches generators declare for the CUDA backend's declared launcher
// (runtime/model/DeclaredLaunch.h): the vocabulary parses both ways, and declareLaunch holds a
// generator to one binding per parameter, of the parameter's C type.
#include "runtime/model/DeclaredLaunch.h"
#include "compiler/codegen/KernelText.h"
#include "compiler/codegen/Kernels.h"

#include <gtest/gtest.h>

#include <variant>

namespace dlm {
namespace {

namespace kp = spec::kernels;

TEST(DeclaredLaunch, ParsesEveryBindingAndTheGrid) {
  StatusOr<kp::DeclaredLaunch> launch = kp::parseDeclaredLaunch(
      "operand1,operand0_stride,result,result_stride,rows,tokens,positions,weight:table,"
      "weight_rows:table,real:eps,integer:head_dim",
      "12,rows");
  ASSERT_TRUE(launch) << launch.status().message();
  const kp::ArgumentSource expected[] = {
      kp::ArgumentSource::operand,    kp::ArgumentSource::operandStride,
      kp::ArgumentSource::result,     kp::ArgumentSource::resultStride,
      kp::ArgumentSource::rows,       kp::ArgumentSource::tokens,
      kp::ArgumentSource::positions,  kp::ArgumentSource::weight,
      kp::ArgumentSource::weightRows, kp::ArgumentSource::real,
      kp::ArgumentSource::integer};
  ASSERT_EQ(launch->arguments.size(), std::size(expected));
  for (size_t i = 0; i < std::size(expected); ++i)
    EXPECT_EQ(launch->arguments[i].source, expected[i]) << i;
  EXPECT_EQ(launch->arguments[0].operand, 1);
  EXPECT_EQ(launch->arguments[1].operand, 0);
  EXPECT_EQ(launch->arguments[7].parameter, "table");
  EXPECT_EQ(launch->arguments[10].parameter, "head_dim");
  EXPECT_FALSE(launch->x.rows);
  EXPECT_EQ(launch->x.count, 12);
  EXPECT_TRUE(launch->y.rows);
  EXPECT_EQ(kp::argumentType(kp::ArgumentSource::real), "float");
  EXPECT_EQ(kp::argumentType(kp::ArgumentSource::weight), "*");
}

TEST(DeclaredLaunch, RejectsWhatIsNotInTheVocabulary) {
  auto error = [](std::string_view arguments, std::string_view grid) {
    StatusOr<kp::DeclaredLaunch> launch = kp::parseDeclaredLaunch(arguments, grid);
    return launch ? std::string() : launch.status().message();
  };
  EXPECT_NE(error("operand", "1,rows").find("launch argument 'operand' is not one of"),
            std::string::npos);
  EXPECT_NE(error("operandx_stride", "1,rows").find("'operandx_stride'"), std::string::npos);
  EXPECT_NE(error("weight:", "1,rows").find("'weight:'"), std::string::npos);
  EXPECT_NE(error("result,,rows", "1,rows").find("launch argument ''"), std::string::npos);
  EXPECT_NE(error("result,rows,", "1,rows").find("launch argument ''"), std::string::npos);
  EXPECT_NE(error("rows", "rows").find("launch grid 'rows' is not 'X,Y'"), std::string::npos);
  EXPECT_NE(error("rows", "0,rows").find("grid dimension '0'"), std::string::npos);
  EXPECT_NE(error("rows", "rows,-1").find("grid dimension '-1'"), std::string::npos);
  EXPECT_EQ(error("rows", "rows,1"), "");
}

TEST(DeclaredLaunch, GeneratorsDeclareOneBindingPerParameter) {
  const StatusOr<codegen::KernelSource> kernels[] = {
      codegen::generateAdd({64, codegen::ElementType::f32}),
      codegen::generateScale({64, codegen::ElementType::bf16}),
      codegen::generateGatedActivation({96, codegen::Activation::silu, codegen::ElementType::f32}),
      codegen::generateEmbedding({64, codegen::ElementType::f32, 2.0})};
  for (const StatusOr<codegen::KernelSource> &kernel : kernels) {
    ASSERT_TRUE(kernel) << kernel.status().message();
    const auto &arguments = kernel->specialisation.at(std::string(kp::kLaunchArguments));
    const auto &grid = kernel->specialisation.at(std::string(kp::kLaunchGrid));
    StatusOr<kp::DeclaredLaunch> launch =
        kp::parseDeclaredLaunch(std::get<std::string>(arguments), std::get<std::string>(grid));
    ASSERT_TRUE(launch) << kernel->name << ": " << launch.status().message();
    EXPECT_EQ(launch->arguments.size(), kernel->parameters.size()) << kernel->name;
  }
}

TEST(DeclaredLaunch, DeclareLaunchHoldsBindingsToTheSignature) {
  codegen::KernelSource kernel;
  kernel.kind = "scale";
  kernel.name = "k";
  kernel.parameters = {{"const float *", "x"}, {"long long", "xStride"}, {"int", "rows"}};
  EXPECT_TRUE(codegen::declareLaunch(kernel, {"operand0", "operand0_stride", "rows"}, "1,rows"));
  EXPECT_EQ(std::get<std::string>(kernel.specialisation.at(std::string(kp::kLaunchArguments))),
            "operand0,operand0_stride,rows");
  Status count = codegen::declareLaunch(kernel, {"operand0", "rows"}, "1,rows");
  EXPECT_EQ(count.message(), "scale kernel k: 2 launch arguments for 3 parameters");
  Status type = codegen::declareLaunch(kernel, {"operand0", "rows", "rows"}, "1,rows");
  EXPECT_EQ(
      type.message(),
      "scale kernel k: launch argument 'rows' does not fit parameter 'xStride' of type long long");
  Status pointer =
      codegen::declareLaunch(kernel, {"result_stride", "operand0_stride", "rows"}, "1,rows");
  EXPECT_NE(
      pointer.message().find("'result_stride' does not fit parameter 'x' of type const float *"),
      std::string::npos);
  Status unknown = codegen::declareLaunch(kernel, {"operand0", "stride", "rows"}, "1,rows");
  EXPECT_NE(unknown.message().find("launch argument 'stride' is not one of"), std::string::npos);
}

} // namespace
} // namespace dlm
