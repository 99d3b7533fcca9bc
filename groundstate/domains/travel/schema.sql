-- Meridian Air customer-care world. Portable SQL: runs unchanged on SQLite and PostgreSQL 15.
-- Money is REAL rounded to cents by the tools, flags are INTEGER 0/1, dates are ISO 'YYYY-MM-DD'
-- TEXT and clock times 'HH:MM' TEXT. Tables are listed in foreign-key order.

-- A traveller is also a Meridian Miles member: the tier and the miles balance live on the profile;
-- mileage_entries is the ledger that explains the balance.
CREATE TABLE travellers (
    id             INTEGER PRIMARY KEY,
    first_name     TEXT NOT NULL,
    last_name      TEXT NOT NULL,
    email          TEXT NOT NULL UNIQUE,
    phone          TEXT NOT NULL,
    date_of_birth  TEXT NOT NULL,
    loyalty_number TEXT NOT NULL UNIQUE,
    tier           TEXT NOT NULL CHECK (tier IN ('blue', 'silver', 'gold', 'platinum')),
    miles_balance  INTEGER NOT NULL CHECK (miles_balance >= 0),
    member_since   TEXT NOT NULL
);

-- One row per operated (or planned) flight: a flight number on a date. Fares are today's prices of
-- a standard fare in each cabin; seats_* are the seats still for sale in each cabin.
CREATE TABLE flights (
    id               INTEGER PRIMARY KEY,
    flight_number    TEXT NOT NULL,
    origin           TEXT NOT NULL,
    destination      TEXT NOT NULL,
    departs_on       TEXT NOT NULL,
    departs_at       TEXT NOT NULL,
    duration_minutes INTEGER NOT NULL CHECK (duration_minutes > 0),
    distance_miles   INTEGER NOT NULL CHECK (distance_miles > 0),
    status           TEXT NOT NULL CHECK (status IN ('scheduled', 'landed', 'cancelled')),
    delay_minutes    INTEGER NOT NULL CHECK (delay_minutes >= 0),
    fare_economy     REAL NOT NULL CHECK (fare_economy > 0),
    fare_premium     REAL NOT NULL CHECK (fare_premium > 0),
    fare_business    REAL NOT NULL CHECK (fare_business > 0),
    seats_economy    INTEGER NOT NULL CHECK (seats_economy >= 0),
    seats_premium    INTEGER NOT NULL CHECK (seats_premium >= 0),
    seats_business   INTEGER NOT NULL CHECK (seats_business >= 0),
    UNIQUE (flight_number, departs_on),
    CHECK (origin <> destination)
);

-- A reservation for one traveller, identified to the traveller by its six-character locator.
CREATE TABLE bookings (
    id            INTEGER PRIMARY KEY,
    locator       TEXT NOT NULL UNIQUE,
    traveller_id  INTEGER NOT NULL REFERENCES travellers (id),
    fare_class    TEXT NOT NULL CHECK (fare_class IN ('basic', 'standard', 'flex')),
    trip_type     TEXT NOT NULL CHECK (trip_type IN ('one_way', 'round_trip')),
    status        TEXT NOT NULL CHECK (status IN ('confirmed', 'completed', 'cancelled')),
    booked_on     TEXT NOT NULL,
    cancelled_on  TEXT,
    cancel_reason TEXT CHECK (cancel_reason IN ('change_of_plans', 'illness', 'flight_cancelled', 'other'))
);

-- The flights of a booking (seq 1 outbound, seq 2 return). fare_paid is what the traveller has paid
-- for this flight in this cabin so far; seat is NULL until one is assigned.
CREATE TABLE flight_segments (
    id         INTEGER PRIMARY KEY,
    booking_id INTEGER NOT NULL REFERENCES bookings (id),
    flight_id  INTEGER NOT NULL REFERENCES flights (id),
    seq        INTEGER NOT NULL CHECK (seq IN (1, 2)),
    cabin      TEXT NOT NULL CHECK (cabin IN ('economy', 'premium', 'business')),
    fare_paid  REAL NOT NULL CHECK (fare_paid >= 0),
    seat       TEXT,
    status     TEXT NOT NULL CHECK (status IN ('active', 'flown', 'cancelled')),
    UNIQUE (booking_id, seq)
);

-- Vouchers in the traveller's name; balance is what is left to spend. `extended` is 1 once the expiry
-- date has been pushed back (allowed once).
CREATE TABLE travel_credits (
    id           INTEGER PRIMARY KEY,
    code         TEXT NOT NULL UNIQUE,
    traveller_id INTEGER NOT NULL REFERENCES travellers (id),
    booking_id   INTEGER REFERENCES bookings (id),
    reason       TEXT NOT NULL CHECK (reason IN ('cancellation', 'downgrade', 'delay_compensation', 'goodwill')),
    amount       REAL NOT NULL CHECK (amount > 0),
    balance      REAL NOT NULL CHECK (balance >= 0),
    issued_on    TEXT NOT NULL,
    expires_on   TEXT NOT NULL,
    status       TEXT NOT NULL CHECK (status IN ('active', 'used', 'expired')),
    extended     INTEGER NOT NULL CHECK (extended IN (0, 1)),
    CHECK (balance <= amount)
);

-- Money moving on a booking: charges (ticket, change, upgrade) and refunds, by card or travel credit.
CREATE TABLE fare_payments (
    id         INTEGER PRIMARY KEY,
    booking_id INTEGER NOT NULL REFERENCES bookings (id),
    kind       TEXT NOT NULL CHECK (kind IN ('charge', 'refund')),
    method     TEXT NOT NULL CHECK (method IN ('card', 'travel_credit')),
    card_last4 TEXT,
    credit_id  INTEGER REFERENCES travel_credits (id),
    purpose    TEXT NOT NULL CHECK (purpose IN ('ticket', 'flight_change', 'cabin_upgrade', 'cancellation')),
    amount     REAL NOT NULL CHECK (amount > 0),
    posted_on  TEXT NOT NULL,
    CHECK ((method = 'card' AND card_last4 IS NOT NULL) OR (method = 'travel_credit' AND credit_id IS NOT NULL))
);

-- The Meridian Miles ledger: positive entries earn, negative entries redeem.
CREATE TABLE mileage_entries (
    id           INTEGER PRIMARY KEY,
    traveller_id INTEGER NOT NULL REFERENCES travellers (id),
    segment_id   INTEGER REFERENCES flight_segments (id),
    kind         TEXT NOT NULL CHECK (kind IN ('flight_accrual', 'partner_bonus', 'award_redemption', 'upgrade_redemption', 'redemption_reversal')),
    miles        INTEGER NOT NULL CHECK (miles <> 0),
    posted_on    TEXT NOT NULL
);

-- The agent's record of what it did or refused, on the traveller's profile (and the booking, if any).
CREATE TABLE travel_notes (
    id           INTEGER PRIMARY KEY,
    traveller_id INTEGER NOT NULL REFERENCES travellers (id),
    booking_id   INTEGER REFERENCES bookings (id),
    body         TEXT NOT NULL,
    created_on   TEXT NOT NULL
);

CREATE TABLE travel_escalations (
    id           INTEGER PRIMARY KEY,
    traveller_id INTEGER NOT NULL REFERENCES travellers (id),
    booking_id   INTEGER REFERENCES bookings (id),
    category     TEXT NOT NULL CHECK (category IN ('compensation_approval', 'account_security', 'policy_exception')),
    status       TEXT NOT NULL CHECK (status IN ('open', 'closed')),
    reason       TEXT NOT NULL,
    created_on   TEXT NOT NULL
);
