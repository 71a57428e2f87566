// The official 1Click client (@defuse-protocol/one-click-sdk-typescript) against the sandbox
// swap API: the token list, quotes for the four swap types with and without a bearer token,
// deposit -> SUCCESS, the ANY_INPUT withdrawals listing, the optional request fields, a bad
// quote request (400, the schema's BadRequestResponse), and the JSON 404 of a path the sandbox
// does not serve. The solver behind the quotes is the bot.
//
// Env: SWAP_API (base URL), SWAP_TOKEN (a partner JWT), USDC, WNEAR (asset ids).
// Prints one JSON object: {"flows": {name: {ok, ...}}}; exit code 1 when a flow failed.
import { randomBytes } from "node:crypto";
import { OneClickService, OpenAPI, QuoteRequest } from "@defuse-protocol/one-click-sdk-typescript";
import { emit, env, fail } from "./lib.mjs";

OpenAPI.BASE = env("SWAP_API");
const token = env("SWAP_TOKEN");
const USDC = env("USDC");
const WNEAR = env("WNEAR");
const E24 = 10n ** 24n;

function request(overrides = {}) {
  return {
    dry: true,
    swapType: QuoteRequest.swapType.EXACT_INPUT,
    slippageTolerance: 100,
    originAsset: WNEAR,
    depositType: QuoteRequest.depositType.ORIGIN_CHAIN,
    destinationAsset: USDC,
    amount: (2n * E24).toString(),
    refundTo: "alice.sandbox",
    refundType: QuoteRequest.refundType.INTENTS,
    recipient: "bob.sandbox",
    recipientType: QuoteRequest.recipientType.INTENTS,
    deadline: new Date(Date.now() + 10 * 60_000).toISOString(),
    // The longest wait: the bus ends it as soon as the bot (its one solver) has answered, so a
    // busy machine makes a quote slower, never NO_QUOTE.
    quoteWaitingTimeMs: 3000,
    ...overrides,
  };
}

async function withToken(useToken, body) {
  OpenAPI.TOKEN = useToken ? token : undefined;
  try {
    return await body();
  } finally {
    OpenAPI.TOKEN = undefined;
  }
}

async function waitFor(address, wanted, timeoutMs = 15_000) {
  const until = Date.now() + timeoutMs;
  let last = null;
  while (Date.now() < until) {
    last = await OneClickService.getExecutionStatus(address);
    if (wanted.includes(last.status)) return last;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`status of ${address} stayed ${last?.status}`);
}

const flows = {};
async function flow(name, body) {
  try {
    flows[name] = { ok: true, ...(await body()) };
  } catch (err) {
    flows[name] = {
      ok: false,
      error: String(err?.message ?? err),
      status: err?.status ?? null,
      body: err?.body ?? null,
    };
  }
}

try {
  await flow("tokens", async () => {
    const tokens = await OneClickService.getTokens();
    return { tokens };
  });
  for (const swapType of ["EXACT_INPUT", "EXACT_OUTPUT", "FLEX_INPUT", "ANY_INPUT"]) {
    for (const useToken of [false, true]) {
      const name = `quote_${swapType.toLowerCase()}_${useToken ? "token" : "no_token"}`;
      await flow(name, () =>
        withToken(useToken, async () => {
          const amount = swapType === "EXACT_OUTPUT" ? "6000000" : (2n * E24).toString();
          const response = await OneClickService.getQuote(request({ swapType, amount }));
          return { quote: response.quote, signature: response.signature };
        }),
      );
    }
  }
  await flow("optional_fields", async () => {
    const response = await OneClickService.getQuote(
      request({
        confidentiality: QuoteRequest.confidentiality.PUBLIC,
        rebates: [{ recipient: "rebate.sandbox", share: 100 }],
      }),
    );
    return { echoed: response.quoteRequest };
  });
  await flow("deposit_success", async () => {
    const response = await OneClickService.getQuote(request({ dry: false }));
    const address = response.quote.depositAddress;
    const submitted = await OneClickService.submitDepositTx({
      txHash: randomBytes(32).toString("hex"),
      depositAddress: address,
    });
    const done = await waitFor(address, ["SUCCESS", "REFUNDED", "FAILED"]);
    return { submitted: submitted.status, status: done.status, details: done.swapDetails };
  });
  await flow("any_input_withdrawals", async () => {
    const response = await OneClickService.getQuote(
      request({ dry: false, swapType: QuoteRequest.swapType.ANY_INPUT }),
    );
    const address = response.quote.depositAddress;
    await OneClickService.submitDepositTx({
      txHash: randomBytes(32).toString("hex"),
      depositAddress: address,
    });
    const done = await waitFor(address, ["SUCCESS", "REFUNDED", "FAILED"]);
    const listing = await OneClickService.getAnyInputQuoteWithdrawals(address);
    return { status: done.status, listing };
  });
  await flow("bad_quote_is_400", async () => {
    try {
      await OneClickService.getQuote(request({ amount: "2 NEAR" }));
    } catch (err) {
      return { status: err.status, message: err.message, body: err.body };
    }
    throw new Error("a quote for amount '2 NEAR' was answered");
  });
  await flow("unserved_path_is_json_404", async () => {
    try {
      await OneClickService.generateIntent({ type: "swap_transfer", depositAddress: "x" });
    } catch (err) {
      return { status: err.status, body: err.body };
    }
    throw new Error("generate-intent answered");
  });
  emit({ flows });
  if (Object.values(flows).some((f) => !f.ok)) process.exitCode = 1;
} catch (err) {
  fail(err);
}
