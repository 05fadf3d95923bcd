# ctest labels of the GoogleTest cases (read by ctest after gtest_discover_tests' lists, so it
# sees linnet_tests_TESTS and jinja_tests_TESTS): one label each (ctest adds a label to those a
# case has, so this is the only place that labels them), `unit` unless named here:
#   mpi   starts mpirun (several ranks, or one rank under mpirun);
#   slow  one process, but seconds (whole-model runs, the render bounds);
#   gpu   needs a GPU, skipped without one (scripts/gpu_check.py's GPU_FILTER).
# `ctest -L unit` is the fast loop (README); CI runs every label.
cmake_policy(PUSH)
cmake_policy(SET CMP0057 NEW)  # if(… IN_LIST …): ctest reads this file with no policies set
set(linnet_mpi_cases
  Cli.FlagsThatDisagreeAreRefused Cli.LogsGoToStderrAndResultsToStdout Cli.UnusedTensorsAreNamedOnce
  Eval.MatchesLmEvaluationHarness Eval.ResumeScoresOnlyWhatIsMissing Eval.Stories15MScoresEqualAcrossRanks
  ExactGeneration.GenerateCommandOnOneAndTwoRanks ExactGeneration.Qwen3_5SharedPrefixOnOneTwoAndFourRanks
  Families.GenerateAndEvalOnOneTwoAndThreeRanks Families.ServeOnTwoRanksAnswersAsGenerateDoes
  Generate.OutputsDoNotDependOnBatchNorRanks Generate.ResumeRunsOnlyWhatIsMissing
  Generate.Stories15MOutputsDoNotDependOnBatchNorRanks
  Inspect.UnderMpirunPrintsTheCardOnce JobFiles.ErrorLinesUnderMpirunAreReportedOnce
  Launcher.MissingInputFileOnOneRankEndsTheJob Eval.AHybridMatchesLmEvaluationHarness
  Pipeline.LayoutsAreRefusedOnEveryRankBeforeLoading TensorParallel.PipelineStagesEveryEntryTheSameBitsAsOneStage
  Pipeline.GenerateEvalAndServeAnswerAsOneStage Moe.PipelineStagesWithExpertsShardedInEachStage
  Pipeline.ResumeRunsOnlyWhatIsMissing Pipeline.QuantizedCheckpointsAnswerAsOneStage
  Moe.ARankLostMidStepEndsEveryRank Moe.BenchReportsTheAllToAllsShareInBothShardings
  Moe.GenerateAndEvalOnOneTwoAndFourRanksInBothShardings Moe.ServeOnTwoRanksAnswersAsGenerateDoes
  MpiCommunicator.OneRankFailingEndsTheJob MpiRun.AHangIsKilledAtTheTimeoutWithEveryRank
  Processors.GenerateLinesOnOneAndTwoRanks RunBatch.TheSameAnswersOnTwoRanksAsShardsAndAsReplicas
  TensorParallel.BadInputOnOneCallEndsTheJobCleanly TensorParallel.DivisibilityErrorOnEveryRankAndNoHang
  TensorParallel.Stories15MEveryEntryShards2And3EqualOneRank TensorParallel.TiedPaddedVocabEveryEntryShards2And3EqualOneRank
  TensorParallel.TinyGqaEveryEntryShards2And4EqualOneRank TensorParallel.TwoReplicasOfTwoShardsEachMatchTheirShards2Run
  Threads.RanksOfANodeShareItsCores)
# The parameterised ones (ctest names them "Suite.Case/param  # GetParam() = …").
set(linnet_mpi_case_pattern
  "^Np/MpiCommunicatorRanks\\.|^Golden/Conformance\\.(Two|Three|Four)RanksMatchTransformers/|^Formats/EvalOnAQuantizedCheckpoint\\.")
set(linnet_slow_cases
  Threads.BusyCoresSlowTheDefaultNoMoreThanOneThread TokenizerBos.AsTransformers TokenizerBos.AsTransformersStories15M
  jinja.Jinja.RendersAreBoundedInBytesAndSteps Generator.GreedyAloneEqualsAmongSixtyFourOthers
  Progress.TerminalShowsABar Progress.EvalLogsLinesWhileItRuns Progress.IntervalZeroAndQuietLogNone
  Progress.GenerateLogsLinesWhileItRuns ExactGeneration.Qwen3_5SharedPrefixRestoresItsStateFromASnapshot)
set(linnet_gpu_case_pattern
  "^(BackendOps|Cuda|CudaModel|CudaEntries|CudaBatchInvariance|CudaPaths|NcclOneRank)\\.|^Backends/(BatchInvariance|NonFinite)\\..*/cuda")

foreach(name IN LISTS linnet_tests_TESTS jinja_tests_TESTS)
  if(name IN_LIST linnet_mpi_cases OR name MATCHES "${linnet_mpi_case_pattern}")
    set_tests_properties("${name}" PROPERTIES LABELS mpi)
  elseif(name IN_LIST linnet_slow_cases)
    set_tests_properties("${name}" PROPERTIES LABELS slow)
  elseif(name MATCHES "${linnet_gpu_case_pattern}")
    set_tests_properties("${name}" PROPERTIES LABELS gpu)
  else()
    set_tests_properties("${name}" PROPERTIES LABELS unit)
  endif()
endforeach()
cmake_policy(POP)
