-- Ridgeline Bank retail-banking world. Portable SQL: runs unchanged on SQLite and PostgreSQL 15.
-- Money is REAL rounded to cents by the tools, flags are INTEGER 0/1, dates are ISO 'YYYY-MM-DD' TEXT.
-- Signed balances: a credit-card account's balance is negative while money is owed on it.
-- Tables are listed in foreign-key order.

CREATE TABLE account_holders (
    id             INTEGER PRIMARY KEY,
    first_name     TEXT NOT NULL,
    last_name      TEXT NOT NULL,
    email          TEXT NOT NULL UNIQUE,
    phone          TEXT NOT NULL,
    date_of_birth  TEXT NOT NULL,
    ssn_last4      TEXT NOT NULL CHECK (LENGTH(ssn_last4) = 4),
    segment        TEXT NOT NULL CHECK (segment IN ('standard', 'premier')),
    customer_since TEXT NOT NULL
);

-- Every identity check the service desk ran; tools act only for a holder who passed one today.
CREATE TABLE holder_verifications (
    id            INTEGER PRIMARY KEY,
    holder_id     INTEGER NOT NULL REFERENCES account_holders (id),
    checked_on    TEXT NOT NULL,
    passed        INTEGER NOT NULL CHECK (passed IN (0, 1)),
    failed_fields TEXT  -- which answers did not match, e.g. 'ssn_last4'; NULL when passed
);

CREATE TABLE banking_accounts (
    id                   INTEGER PRIMARY KEY,
    holder_id            INTEGER NOT NULL REFERENCES account_holders (id),
    number               TEXT NOT NULL UNIQUE,
    kind                 TEXT NOT NULL CHECK (kind IN ('checking', 'savings', 'credit_card')),
    nickname             TEXT NOT NULL,
    status               TEXT NOT NULL CHECK (status IN ('open', 'frozen', 'closed')),
    balance              REAL NOT NULL,
    credit_limit         REAL CHECK (credit_limit IS NULL OR credit_limit > 0),
    daily_transfer_limit REAL NOT NULL CHECK (daily_transfer_limit >= 0),
    opened_on            TEXT NOT NULL
);

-- Money set aside (deposited checks, pending authorisations): available = balance - active holds.
CREATE TABLE account_holds (
    id         INTEGER PRIMARY KEY,
    account_id INTEGER NOT NULL REFERENCES banking_accounts (id),
    amount     REAL NOT NULL CHECK (amount > 0),
    reason     TEXT NOT NULL CHECK (reason IN ('check_deposit', 'pending_authorization', 'legal_order')),
    placed_on  TEXT NOT NULL,
    release_on TEXT NOT NULL,
    status     TEXT NOT NULL CHECK (status IN ('active', 'released'))
);

-- People and companies a holder pays from outside the bank.
CREATE TABLE transfer_payees (
    id             INTEGER PRIMARY KEY,
    holder_id      INTEGER NOT NULL REFERENCES account_holders (id),
    name           TEXT NOT NULL,
    nickname       TEXT,
    routing_number TEXT NOT NULL CHECK (LENGTH(routing_number) = 9),
    account_number TEXT NOT NULL,
    status         TEXT NOT NULL CHECK (status IN ('active', 'removed')),
    added_on       TEXT NOT NULL
);

-- A move of money out of an account: to another account of the holder, or to a payee (possibly scheduled).
CREATE TABLE fund_transfers (
    id              INTEGER PRIMARY KEY,
    from_account_id INTEGER NOT NULL REFERENCES banking_accounts (id),
    to_account_id   INTEGER REFERENCES banking_accounts (id),
    payee_id        INTEGER REFERENCES transfer_payees (id),
    amount          REAL NOT NULL CHECK (amount > 0),
    send_on         TEXT NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('scheduled', 'completed', 'cancelled')),
    created_on      TEXT NOT NULL,
    cancelled_on    TEXT,
    CHECK ((to_account_id IS NULL AND payee_id IS NOT NULL) OR (to_account_id IS NOT NULL AND payee_id IS NULL))
);

-- Debit cards draw on a checking account, credit cards on a credit_card account.
CREATE TABLE banking_cards (
    id                 INTEGER PRIMARY KEY,
    account_id         INTEGER NOT NULL REFERENCES banking_accounts (id),
    kind               TEXT NOT NULL CHECK (kind IN ('debit', 'credit')),
    last4              TEXT NOT NULL CHECK (LENGTH(last4) = 4),
    status             TEXT NOT NULL CHECK (status IN ('active', 'frozen', 'lost', 'stolen', 'compromised', 'replaced', 'closed')),
    daily_limit        REAL NOT NULL CHECK (daily_limit > 0),
    expires_on         TEXT NOT NULL,
    issued_on          TEXT NOT NULL,
    replaces_card_id   INTEGER REFERENCES banking_cards (id),
    replacement_reason TEXT CHECK (replacement_reason IN ('lost', 'stolen', 'compromised', 'damaged', 'expiring')),
    delivery           TEXT CHECK (delivery IN ('standard', 'expedited'))
);

-- Posted money movements in (posted_on, id) order; amount is signed and balance_after is the running balance.
CREATE TABLE account_ledger (
    id               INTEGER PRIMARY KEY,
    account_id       INTEGER NOT NULL REFERENCES banking_accounts (id),
    posted_on        TEXT NOT NULL,
    kind             TEXT NOT NULL CHECK (kind IN ('deposit', 'card_purchase', 'atm_withdrawal', 'transfer_in', 'transfer_out',
                                                   'payment_sent', 'fee', 'fee_reversal', 'interest', 'dispute_credit')),
    amount           REAL NOT NULL,
    balance_after    REAL NOT NULL,
    description      TEXT NOT NULL,
    merchant         TEXT,
    card_id          INTEGER REFERENCES banking_cards (id),
    transfer_id      INTEGER REFERENCES fund_transfers (id),
    fee_code         TEXT CHECK (fee_code IN ('overdraft', 'monthly_service', 'atm', 'wire', 'card_expedite', 'late_payment')),
    related_entry_id INTEGER REFERENCES account_ledger (id),  -- the fee a reversal undoes, the charge a dispute credit covers
    reversal_reason  TEXT CHECK (reversal_reason IN ('bank_error', 'courtesy'))
);

CREATE TABLE card_disputes (
    id                 INTEGER PRIMARY KEY,
    entry_id           INTEGER NOT NULL REFERENCES account_ledger (id),
    account_id         INTEGER NOT NULL REFERENCES banking_accounts (id),
    card_id            INTEGER NOT NULL REFERENCES banking_cards (id),
    reason             TEXT NOT NULL CHECK (reason IN ('unauthorized', 'duplicate_charge', 'incorrect_amount', 'goods_not_received', 'cancelled_recurring')),
    amount             REAL NOT NULL CHECK (amount > 0),
    provisional_credit REAL NOT NULL CHECK (provisional_credit >= 0),
    status             TEXT NOT NULL CHECK (status IN ('open', 'won', 'lost', 'withdrawn')),
    opened_on          TEXT NOT NULL,
    closed_on          TEXT
);

-- The agent's record of what it did or refused, on the holder's profile (and the account, if any).
CREATE TABLE banking_notes (
    id         INTEGER PRIMARY KEY,
    holder_id  INTEGER NOT NULL REFERENCES account_holders (id),
    account_id INTEGER REFERENCES banking_accounts (id),
    body       TEXT NOT NULL,
    created_on TEXT NOT NULL
);

-- Cases handed to a specialist team.
CREATE TABLE banking_referrals (
    id         INTEGER PRIMARY KEY,
    holder_id  INTEGER NOT NULL REFERENCES account_holders (id),
    account_id INTEGER REFERENCES banking_accounts (id),
    team       TEXT NOT NULL CHECK (team IN ('fraud', 'card_services', 'supervisor')),
    status     TEXT NOT NULL CHECK (status IN ('open', 'closed')),
    summary    TEXT NOT NULL,
    created_on TEXT NOT NULL
);
