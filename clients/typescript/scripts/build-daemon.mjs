// Builds breakerd from this repository into build/breakerd for the tests
// (npm's pretest runs it). With BREAKERD_BIN set, the tests run that
// binary and nothing is built.
import { execFileSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

if (!process.env.BREAKERD_BIN) {
  const here = dirname(fileURLToPath(import.meta.url));
  const out = join(here, "..", "build", "breakerd");
  execFileSync("go", ["build", "-o", out, "./cmd/breakerd"], { cwd: join(here, "..", "..", ".."), stdio: "inherit" });
}
