-- Harborline Mutual motor insurance world. Portable SQL: runs unchanged on SQLite and PostgreSQL 15.
-- Money is REAL rounded to cents by the tools, flags are INTEGER 0/1, dates are ISO 'YYYY-MM-DD' TEXT.
-- Tables are listed in foreign-key order.

CREATE TABLE policyholders (
    id             INTEGER PRIMARY KEY,
    first_name     TEXT NOT NULL,
    last_name      TEXT NOT NULL,
    email          TEXT NOT NULL UNIQUE,
    phone          TEXT NOT NULL,
    date_of_birth  TEXT NOT NULL,
    state          TEXT NOT NULL,
    customer_since TEXT NOT NULL
);

-- One-year motor policies. annual_premium is always the sum of the premiums of the policy's covered
-- vehicles plus the loadings of its active named drivers; the tools keep it so.
CREATE TABLE motor_policies (
    id               INTEGER PRIMARY KEY,
    policyholder_id  INTEGER NOT NULL REFERENCES policyholders (id),
    coverage         TEXT NOT NULL CHECK (coverage IN ('third_party', 'third_party_fire_theft', 'comprehensive')),
    deductible       REAL NOT NULL CHECK (deductible IN (250, 500, 1000)),
    status           TEXT NOT NULL CHECK (status IN ('active', 'lapsed', 'cancelled')),
    start_date       TEXT NOT NULL,
    end_date         TEXT NOT NULL,
    annual_premium   REAL NOT NULL CHECK (annual_premium >= 0),
    no_claims_years  INTEGER NOT NULL CHECK (no_claims_years >= 0),
    cancelled_on     TEXT
);

-- A vehicle stays on record after removal (status 'removed') so old claims keep pointing at it.
CREATE TABLE insured_vehicles (
    id             INTEGER PRIMARY KEY,
    policy_id      INTEGER NOT NULL REFERENCES motor_policies (id),
    registration   TEXT NOT NULL,
    make           TEXT NOT NULL,
    model          TEXT NOT NULL,
    model_year     INTEGER NOT NULL CHECK (model_year >= 1950),
    vehicle_value  REAL NOT NULL CHECK (vehicle_value > 0),
    usage          TEXT NOT NULL CHECK (usage IN ('personal', 'commute', 'business')),
    annual_premium REAL NOT NULL CHECK (annual_premium >= 0),
    status         TEXT NOT NULL CHECK (status IN ('covered', 'removed')),
    added_on       TEXT NOT NULL,
    removed_on     TEXT
);

-- People allowed to drive the policy's vehicles; the policyholder is listed with relationship 'self'.
-- premium_loading is what the driver adds to the annual premium (0 for the policyholder).
CREATE TABLE named_drivers (
    id                INTEGER PRIMARY KEY,
    policy_id         INTEGER NOT NULL REFERENCES motor_policies (id),
    first_name        TEXT NOT NULL,
    last_name         TEXT NOT NULL,
    date_of_birth     TEXT NOT NULL,
    licence_number    TEXT NOT NULL,
    licence_issued_on TEXT NOT NULL,
    relationship      TEXT NOT NULL CHECK (relationship IN ('self', 'spouse', 'partner', 'child', 'parent', 'other')),
    premium_loading   REAL NOT NULL CHECK (premium_loading >= 0),
    status            TEXT NOT NULL CHECK (status IN ('active', 'removed')),
    added_on          TEXT NOT NULL,
    removed_on        TEXT
);

-- A mid-term change to a policy and what it did to the premium: the annual premium before and after,
-- and the pro-rated amount charged (positive) or credited (negative) for the rest of the term.
CREATE TABLE policy_endorsements (
    id                INTEGER PRIMARY KEY,
    policy_id         INTEGER NOT NULL REFERENCES motor_policies (id),
    kind              TEXT NOT NULL CHECK (kind IN ('add_driver', 'remove_driver', 'add_vehicle', 'remove_vehicle', 'change_cover')),
    vehicle_id        INTEGER REFERENCES insured_vehicles (id),
    driver_id         INTEGER REFERENCES named_drivers (id),
    effective_date    TEXT NOT NULL,
    premium_before    REAL NOT NULL CHECK (premium_before >= 0),
    premium_after     REAL NOT NULL CHECK (premium_after >= 0),
    prorated_amount   REAL NOT NULL
);

-- Claims for damage to or loss of an insured vehicle. driver_id is NULL when nobody was driving
-- (theft, vandalism, weather, a parked car). approved_amount is set when the claim is approved.
CREATE TABLE motor_claims (
    id               INTEGER PRIMARY KEY,
    policy_id        INTEGER NOT NULL REFERENCES motor_policies (id),
    vehicle_id       INTEGER NOT NULL REFERENCES insured_vehicles (id),
    driver_id        INTEGER REFERENCES named_drivers (id),
    incident_date    TEXT NOT NULL,
    reported_on      TEXT NOT NULL,
    incident_type    TEXT NOT NULL CHECK (incident_type IN ('collision', 'theft', 'fire', 'vandalism', 'weather', 'windscreen')),
    description      TEXT NOT NULL,
    estimated_damage REAL NOT NULL CHECK (estimated_damage > 0),
    status           TEXT NOT NULL CHECK (status IN ('open', 'approved', 'denied', 'paid')),
    approved_amount  REAL CHECK (approved_amount > 0),
    denial_reason    TEXT CHECK (denial_reason IN ('late_report', 'not_covered', 'unlisted_driver', 'below_deductible')),
    decided_on       TEXT
);

CREATE TABLE claim_payouts (
    id       INTEGER PRIMARY KEY,
    claim_id INTEGER NOT NULL REFERENCES motor_claims (id),
    amount   REAL NOT NULL CHECK (amount > 0),
    method   TEXT NOT NULL CHECK (method IN ('bank_transfer', 'cheque', 'repairer')),
    paid_on  TEXT NOT NULL
);

-- The agent's record of what it did or refused, on the policyholder's file (and the policy or claim, if any).
CREATE TABLE insurance_notes (
    id              INTEGER PRIMARY KEY,
    policyholder_id INTEGER NOT NULL REFERENCES policyholders (id),
    policy_id       INTEGER REFERENCES motor_policies (id),
    claim_id        INTEGER REFERENCES motor_claims (id),
    body            TEXT NOT NULL,
    created_on      TEXT NOT NULL
);

-- Cases handed to a specialist team: claims above the agent's authority, risks underwriting must
-- accept, suspected fraud, and exceptions a customer asks for.
CREATE TABLE specialist_referrals (
    id              INTEGER PRIMARY KEY,
    policyholder_id INTEGER NOT NULL REFERENCES policyholders (id),
    policy_id       INTEGER REFERENCES motor_policies (id),
    claim_id        INTEGER REFERENCES motor_claims (id),
    team            TEXT NOT NULL CHECK (team IN ('claims_adjuster', 'underwriting', 'fraud', 'customer_relations')),
    status          TEXT NOT NULL CHECK (status IN ('open', 'closed')),
    reason          TEXT NOT NULL,
    created_on      TEXT NOT NULL
);
