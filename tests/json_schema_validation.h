// Validates sampled JSON against its schemas with python3-jsonschema (Draft 2020-12 unless a schema says
// otherwise, formats checked), for the structured-output tests.
#pragma once
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "test_support.h"

namespace kestrel::test {

// cases: [{"name" (optional), "schema", "samples": [...]}, ...]. Returns the validator's exit status (0:
// every sample valid) and sets output to its report, ending "checked N invalid M".
template <class Json>
int validate_with_jsonschema(const Json& cases, const std::string& tag, std::string& output) {
  const std::string cases_path = temp_path(tag + "-samples.json"), script_path = temp_path(tag + "-validate.py");
  std::ofstream(cases_path) << cases.dump();
  std::ofstream(script_path) << "import json, sys, jsonschema\n"
                                "bad = n = 0\n"
                                "for case in json.load(open(sys.argv[1])):\n"
                                "    cls = jsonschema.validators.validator_for(case['schema'], default=jsonschema.Draft202012Validator)\n"
                                "    v = cls(case['schema'], format_checker=jsonschema.FormatChecker())\n"
                                "    for s in case['samples']:\n"
                                "        n += 1\n"
                                "        for e in v.iter_errors(s):\n"
                                "            bad += 1\n"
                                "            print('invalid', case.get('name', ''), json.dumps(s)[:300], '->', e.message[:200])\n"
                                "print('checked', n, 'invalid', bad)\n"
                                "sys.exit(1 if bad else 0)\n";
  const int status = run_command("python3 " + script_path + " " + cases_path + " 2>&1", output);
  std::filesystem::remove(cases_path);
  std::filesystem::remove(script_path);
  return status;
}

}  // namespace kestrel::test
