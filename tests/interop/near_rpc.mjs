// near-api-js against the sandbox's ledger RPC: the read calls a client makes at start-up.
// Env: CHAIN_RPC, CONTRACT, ACCOUNT_ID, PUBLIC_KEY. Prints one JSON object on stdout.
import { Account, providers } from "near-api-js";
import { emit, fail, env } from "./lib.mjs";

const rpc = env("CHAIN_RPC");
const contract = env("CONTRACT");
const accountId = env("ACCOUNT_ID");
const publicKey = env("PUBLIC_KEY");

try {
  const provider = new providers.JsonRpcProvider({ url: rpc });
  const status = await provider.status();
  const block = await provider.block({ finality: "final" });
  const byHeight = await provider.block({ blockId: block.header.height });
  const gas = await provider.gasPrice(null);
  const view = await provider.query({
    request_type: "view_account",
    finality: "final",
    account_id: accountId,
  });
  const accessKey = await provider.query({
    request_type: "view_access_key",
    finality: "final",
    account_id: accountId,
    public_key: publicKey,
  });
  const keyList = await provider.query({
    request_type: "view_access_key_list",
    finality: "final",
    account_id: accountId,
  });
  const account = new Account({ provider, networkId: "sandbox", signer: undefined }, accountId);
  const state = await account.state();
  const accessKeys = await account.getAccessKeys();
  const balance = await account.getAccountBalance();
  const salt = await account.viewFunction({ contractId: contract, methodName: "current_salt", args: {} });
  let unknown = null;
  try {
    await provider.query({ request_type: "view_account", finality: "final", account_id: "nobody.sandbox" });
  } catch (err) {
    unknown = { type: err.type ?? null, message: String(err.message ?? err) };
  }
  emit({
    chain_id: status.chain_id,
    latest_block_height: status.sync_info.latest_block_height,
    block_height: block.header.height,
    block_hash_matches: byHeight.header.hash === block.header.hash,
    gas_price: gas.gas_price,
    view_account_amount: view.amount,
    access_key_permission: accessKey.permission,
    access_key_list: keyList.keys.map((k) => k.public_key),
    account_state_code_hash: state.code_hash,
    account_access_keys: accessKeys.length,
    current_salt: salt,
    account_balance_available: balance.available,
    unknown_account_error: unknown,
  });
} catch (err) {
  fail(err);
}
