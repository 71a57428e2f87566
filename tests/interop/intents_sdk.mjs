// The official intents SDK (@defuse-protocol/intents-sdk) against the sandbox: every intent type,
// both salted nonce layouts (versioned: the SDK's default; the spec's salted layout through a
// payload factory), an erc191 signer (viem), and quote -> publish -> SETTLED against the solver
// running on the sandbox bus (the bot itself, in tests/interop/test_interop.py).
//
// Env: RELAY_URL (base of /rpc), CHAIN_RPC, CONTRACT, USER_ACCOUNT, USER_KEY (ed25519 secret),
// EVM_PRIVATE_KEY (0x hex), USDC, WNEAR (asset ids), RECEIVER (an account id).
// Prints one JSON object: {"flows": {name: {ok, ...}}}; exit code 1 when a flow failed.
import { randomBytes } from "node:crypto";
import { createRequire } from "node:module";
import { KeyPair, providers } from "near-api-js";
import { privateKeyToAccount } from "viem/accounts";
import { emit, env, fail } from "./lib.mjs";

// The SDK's ESM build imports "near-api-js/lib/utils/serialize" without an extension, which
// Node's ESM resolver refuses; its CommonJS build (the "require" export) loads fine.
const require = createRequire(import.meta.url);
const { IntentsSDK, createIntentSignerNearKeyPair, createIntentSignerViem } = require(
  "@defuse-protocol/intents-sdk",
);
const { solverRelay } = require("@defuse-protocol/internal-utils");

const relay = env("RELAY_URL");
const chainRpc = env("CHAIN_RPC");
const contract = env("CONTRACT");
const userAccount = env("USER_ACCOUNT");
const userKey = KeyPair.fromString(env("USER_KEY"));
const evm = privateKeyToAccount(env("EVM_PRIVATE_KEY"));
const USDC = env("USDC");
const WNEAR = env("WNEAR");
const receiver = env("RECEIVER");
const SETTLE_TIMEOUT_MS = 20_000;

const envConfig = {
  contractID: contract,
  poaTokenFactoryContractID: "",
  poaBridgeBaseURL: "",
  solverRelayBaseURL: relay,
  managerConsoleBaseURL: "",
  bridgeIndexerURL: "",
  nearIntentsBaseURL: "",
};

function sdkFor(signer) {
  return new IntentsSDK({
    referral: "sandbox-interop",
    env: envConfig,
    rpc: { "near:mainnet": [chainRpc] },
    intentSigner: signer,
  });
}

const userSigner = createIntentSignerNearKeyPair({ signer: userKey, accountId: userAccount });
const sdk = sdkFor(userSigner);

async function settle(sdkInstance, args) {
  const { intentHash } = await sdkInstance.signAndSendIntent(args);
  const tx = await sdkInstance.waitForIntentSettlement({
    intentHash,
    signal: AbortSignal.timeout(SETTLE_TIMEOUT_MS),
  });
  const status = await sdkInstance.getIntentStatus({ intentHash });
  return { intent_hash: intentHash, tx_hash: tx.hash, status: status.status };
}

async function saltedNonce() {
  // The spec's layout (spec 5.3): the contract's current salt, then 28 unique bytes.
  const provider = new providers.JsonRpcProvider({ url: chainRpc });
  const answer = await provider.query({
    request_type: "call_function",
    finality: "final",
    account_id: contract,
    method_name: "current_salt",
    args_base64: Buffer.from("{}").toString("base64"),
  });
  const salt = JSON.parse(Buffer.from(answer.result).toString());
  return Buffer.concat([Buffer.from(salt, "hex"), randomBytes(28)]).toString("base64");
}

const flows = {};
async function flow(name, body) {
  try {
    flows[name] = { ok: true, ...(await body()) };
  } catch (err) {
    flows[name] = {
      ok: false,
      error: String(err?.message ?? err),
      details: err?.details ?? null,
      cause: err?.cause ? String(err.cause?.message ?? err.cause) : null,
    };
  }
}

try {
  await flow("transfer_versioned_nonce", () =>
    settle(sdk, {
      intents: [{ intent: "transfer", receiver_id: receiver, tokens: { [USDC]: "1000" } }],
    }),
  );
  await flow("transfer_salted_nonce", async () => {
    const nonce = await saltedNonce();
    return { nonce, ...(await settle(sdk, {
      intents: [{ intent: "transfer", receiver_id: receiver, tokens: { [USDC]: "2000" }, memo: "salted" }],
      payload: async () => ({ nonce }),
    })) };
  });
  await flow("ft_withdraw", () =>
    settle(sdk, {
      intents: [
        {
          intent: "ft_withdraw",
          token: USDC.slice("nep141:".length),
          receiver_id: receiver,
          amount: "3000",
          memo: "interop",
          storage_deposit: "1250000000000000000000",
        },
      ],
    }),
  );
  await flow("storage_deposit", () =>
    settle(sdk, {
      intents: [
        {
          intent: "storage_deposit",
          contract_id: USDC.slice("nep141:".length),
          account_id: receiver,
          amount: "1250000000000000000000",
        },
      ],
    }),
  );
  const extra = KeyPair.fromRandom("ed25519");
  const extraPublic = extra.getPublicKey().toString();
  await flow("add_public_key", async () => ({
    public_key: extraPublic,
    ...(await settle(sdk, { intents: [{ intent: "add_public_key", public_key: extraPublic }] })),
  }));
  await flow("sign_with_added_key", () =>
    settle(sdkFor(createIntentSignerNearKeyPair({ signer: extra, accountId: userAccount })), {
      intents: [{ intent: "transfer", receiver_id: receiver, tokens: { [USDC]: "4000" } }],
    }),
  );
  await flow("remove_public_key", () =>
    settle(sdk, { intents: [{ intent: "remove_public_key", public_key: extraPublic }] }),
  );
  await flow("removed_key_is_refused", async () => {
    try {
      await sdkFor(createIntentSignerNearKeyPair({ signer: extra, accountId: userAccount }))
        .signAndSendIntent({
          intents: [{ intent: "transfer", receiver_id: receiver, tokens: { [USDC]: "1" } }],
        });
    } catch (err) {
      return { code: err?.code ?? null, reason: String(err?.details ?? err?.message ?? err) };
    }
    throw new Error("a transfer signed with a removed key was accepted");
  });
  await flow("erc191_transfer", async () => ({
    signer_id: evm.address.toLowerCase(),
    ...(await settle(sdkFor(createIntentSignerViem({ signer: evm })), {
      intents: [{ intent: "transfer", receiver_id: receiver, tokens: { [USDC]: "5000" } }],
    })),
  }));
  for (const [name, side] of [
    ["quote_exact_in_settled", { exact_amount_in: "2000000000000000000000000" }],
    ["quote_exact_out_settled", { exact_amount_out: "3000000" }],
  ]) {
    await flow(name, async () => {
      const quote = await solverRelay.getQuote({
        quoteParams: {
          defuse_asset_identifier_in: WNEAR,
          defuse_asset_identifier_out: USDC,
          min_deadline_ms: 60_000,
          wait_ms: 3_000, // the longest; the relay ends it once the bot has answered
          ...side,
        },
        config: { baseURL: relay },
      });
      const settled = await settle(sdk, {
        intents: [
          {
            intent: "token_diff",
            diff: { [WNEAR]: `-${quote.amount_in}`, [USDC]: quote.amount_out },
          },
        ],
        relayParams: async () => ({ quoteHashes: [quote.quote_hash] }),
      });
      return { quote_hash: quote.quote_hash, amount_in: quote.amount_in, amount_out: quote.amount_out, ...settled };
    });
  }
  emit({ flows });
  if (Object.values(flows).some((f) => !f.ok)) process.exitCode = 1;
} catch (err) {
  fail(err);
}
