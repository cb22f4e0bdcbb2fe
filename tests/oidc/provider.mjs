// The OpenID provider tbhub's tests sign in against: oidc-provider (OpenID Certified) with its
// development login form, on loopback. Accounts are whatever login the form is given; their
// claims come from the JSON file ACCOUNTS_FILE ({login: {email, name, groups}}), read at each
// sign-in so a test can change them between sign-ins.
// Usage: node provider.mjs PORT CLIENTS_JSON ACCOUNTS_FILE
import { readFileSync } from 'node:fs';
import Provider from 'oidc-provider';

const [port, clientsJson, accountsFile] = process.argv.slice(2);
const issuer = `http://127.0.0.1:${port}`;

const provider = new Provider(issuer, {
  clients: JSON.parse(clientsJson),
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['name', 'preferred_username'],
    groups: ['groups'],
  },
  scopes: ['openid', 'email', 'profile', 'groups'],
  pkce: { required: () => true },
  features: { devInteractions: { enabled: true } },
  cookies: { keys: ['tbhub-test-only-cookie-key'] },
  async findAccount(_ctx, id) {
    const account = JSON.parse(readFileSync(accountsFile, 'utf8'))[id] || {};
    return {
      accountId: id,
      async claims() {
        return {
          sub: id,
          email: account.email ?? `${id}@example.test`,
          email_verified: true,
          name: account.name ?? id,
          preferred_username: id,
          groups: account.groups ?? [],
        };
      },
    };
  },
});
provider.proxy = false;
const server = provider.listen(Number(port), '127.0.0.1', () => {
  console.log(`ready ${issuer}`);
});
for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => server.close(() => process.exit(0)));
}
