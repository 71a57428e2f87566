// Shared helpers of the interop scripts: read the environment, print one JSON result line.
export function env(name, fallback) {
  const value = process.env[name];
  if (value === undefined || value === "") {
    if (fallback !== undefined) return fallback;
    throw new Error(`environment variable ${name} is not set`);
  }
  return value;
}

export function emit(result) {
  process.stdout.write(JSON.stringify(result, (_k, v) => (typeof v === "bigint" ? v.toString() : v)) + "\n");
}

export function fail(err) {
  const detail = {
    error: String(err?.message ?? err),
    name: err?.name ?? null,
    cause: err?.cause ? String(err.cause?.message ?? err.cause) : null,
    stack: err?.stack ? String(err.stack).split("\n").slice(0, 6).join("\n") : null,
  };
  process.stdout.write(JSON.stringify({ failed: detail }) + "\n");
  process.exitCode = 1;
}
