#!/usr/bin/env bash
# npm pack, then install the tarball into a fresh folder and import it:
# the package's entry points and types as a user gets them (no test file,
# no source map of ours, nothing of node_modules). Run from clients/typescript.
set -euo pipefail
here=$(pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
npm pack --silent --pack-destination "$tmp" >/dev/null
tarball=$(ls "$tmp"/breakerd-client-*.tgz)
tar -tzf "$tarball" | sort > "$tmp/files"
if grep -E 'package/(src|test|build|node_modules)/' "$tmp/files"; then echo "pack-check: the tarball carries files it must not"; exit 1; fi
mkdir "$tmp/app"
cd "$tmp/app"
printf '{"name":"app","private":true,"type":"module"}\n' > package.json
npm install --silent --no-audit --no-fund "$tarball"
if [ -n "$(ls node_modules | grep -v '^@breakerd$' | grep -v '^\.')" ]; then echo "pack-check: installing pulled in dependencies: $(ls node_modules)"; exit 1; fi
cat > main.mjs <<'JS'
import { Client, CircuitOpenError, Run } from "@breakerd/client";
import { toolsForRun } from "@breakerd/client/ai";
import { toolsForRun as agentTools } from "@breakerd/client/openai-agents";
import { runTool } from "@breakerd/client/tools";
const c = new Client({ urls: "http://127.0.0.1:7071", workerId: "w" });
for (const f of [Client, CircuitOpenError, Run, toolsForRun, agentTools, runTool]) if (typeof f !== "function") throw new Error("missing export");
console.log("pack-check: the tarball imports:", c.workerId, new Run(c).notice() === "");
JS
node main.mjs
# The types, through the exports map, checked by the package's own compiler.
cat > main.ts <<'TS'
import { Client, type Permit } from "@breakerd/client";
import { guardTools } from "@breakerd/client/ai";
const c: Client = new Client({ urls: ["http://127.0.0.1:7071"], workerId: "w" });
const p: Promise<Permit> = c.allow("b", { tool: "t" });
void p;
void guardTools;
TS
"$here/node_modules/.bin/tsc" --strict --noEmit --module nodenext --moduleResolution nodenext --target es2022 --lib es2022,dom main.ts
echo "pack-check: the types check under --strict"
