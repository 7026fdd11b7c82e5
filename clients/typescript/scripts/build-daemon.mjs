// Builds breakerd from this repository into build/breakerd for the tests
// (npm's pretest runs it), and the OTLP receiver the traced tests start,
// otlpsink, into build/otlpsink. With BREAKERD_BIN (BREAKERD_OTLPSINK_BIN)
// set, the tests run that binary and it is not built.
import { execFileSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const build = (out, pkg) =>
  execFileSync("go", ["build", "-o", join(here, "..", "build", out), pkg], { cwd: join(here, "..", "..", ".."), stdio: "inherit" });
if (!process.env.BREAKERD_BIN) build("breakerd", "./cmd/breakerd");
if (!process.env.BREAKERD_OTLPSINK_BIN) build("otlpsink", "./internal/tests/otlptest/otlpsink");
