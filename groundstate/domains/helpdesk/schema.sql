-- Brightline Systems IT service desk world. Portable SQL: runs unchanged on SQLite and PostgreSQL 15.
-- Money is REAL rounded to cents, flags are INTEGER 0/1, dates are ISO 'YYYY-MM-DD' TEXT.
-- Tables are listed in foreign-key order.

-- Everyone the desk serves. A manager is a staff member others report to (manager_id); executives
-- head a department and report to nobody. employee_number and date_of_birth are the identity check
-- for credential resets: tools compare them and never show them.
CREATE TABLE staff_members (
    id                INTEGER PRIMARY KEY,
    employee_number   TEXT NOT NULL UNIQUE,
    first_name        TEXT NOT NULL,
    last_name         TEXT NOT NULL,
    email             TEXT NOT NULL UNIQUE,
    phone             TEXT NOT NULL,
    date_of_birth     TEXT NOT NULL,
    department        TEXT NOT NULL CHECK (department IN ('engineering', 'sales', 'customer_support', 'marketing', 'finance',
                                                          'operations', 'hr', 'legal', 'it')),
    role              TEXT NOT NULL CHECK (role IN ('employee', 'manager', 'executive', 'contractor')),
    manager_id        INTEGER REFERENCES staff_members (id),
    office            TEXT NOT NULL CHECK (office IN ('Boston', 'Denver', 'Austin', 'Remote')),
    employment_status TEXT NOT NULL CHECK (employment_status IN ('active', 'on_leave', 'terminated')),
    hired_on          TEXT NOT NULL,
    contract_end      TEXT,
    mfa_method        TEXT NOT NULL CHECK (mfa_method IN ('authenticator_app', 'sms', 'hardware_key', 'none')),
    account_locked    INTEGER NOT NULL CHECK (account_locked IN (0, 1)),
    password_reset_on TEXT,
    mfa_reset_on      TEXT
);

-- The software catalogue. allowed_departments is 'all' or a comma-separated list of departments
-- whose staff may get standard access without an approval.
CREATE TABLE software_apps (
    id                  INTEGER PRIMARY KEY,
    name                TEXT NOT NULL UNIQUE,
    vendor              TEXT NOT NULL,
    allowed_departments TEXT NOT NULL,
    seats_total         INTEGER NOT NULL CHECK (seats_total >= 0),
    monthly_cost        REAL NOT NULL CHECK (monthly_cost >= 0),
    active              INTEGER NOT NULL CHECK (active IN (0, 1))
);

-- Access that needs a manager's decision; approver_id is the manager who must decide.
CREATE TABLE software_access_requests (
    id            INTEGER PRIMARY KEY,
    staff_id      INTEGER NOT NULL REFERENCES staff_members (id),
    app_id        INTEGER NOT NULL REFERENCES software_apps (id),
    access_level  TEXT NOT NULL CHECK (access_level IN ('standard', 'admin')),
    status        TEXT NOT NULL CHECK (status IN ('awaiting_approval', 'approved', 'rejected', 'fulfilled')),
    justification TEXT NOT NULL,
    requested_on  TEXT NOT NULL,
    approver_id   INTEGER REFERENCES staff_members (id),
    decided_on    TEXT
);

-- A grant is active while revoked_on is NULL and expires_on (if any) is not past.
CREATE TABLE software_access_grants (
    id            INTEGER PRIMARY KEY,
    staff_id      INTEGER NOT NULL REFERENCES staff_members (id),
    app_id        INTEGER NOT NULL REFERENCES software_apps (id),
    access_level  TEXT NOT NULL CHECK (access_level IN ('standard', 'admin')),
    request_id    INTEGER REFERENCES software_access_requests (id),
    granted_on    TEXT NOT NULL,
    expires_on    TEXT,
    revoked_on    TEXT,
    revoke_reason TEXT CHECK (revoke_reason IN ('no_longer_needed', 'role_change', 'offboarding', 'security_concern'))
);

CREATE TABLE hardware_assets (
    id             INTEGER PRIMARY KEY,
    asset_tag      TEXT NOT NULL UNIQUE,
    kind           TEXT NOT NULL CHECK (kind IN ('laptop', 'monitor', 'phone', 'headset', 'dock', 'tablet')),
    model          TEXT NOT NULL,
    serial_number  TEXT NOT NULL UNIQUE,
    status         TEXT NOT NULL CHECK (status IN ('in_stock', 'assigned', 'on_loan', 'in_repair', 'lost', 'retired')),
    assigned_to    INTEGER REFERENCES staff_members (id),
    purchased_on   TEXT NOT NULL,
    warranty_until TEXT NOT NULL,
    cost           REAL NOT NULL CHECK (cost >= 0)
);

-- Every time the desk hands out an asset: a loan (due back, with a purpose) or a replacement of
-- another asset (with the reason the old one went out of service).
CREATE TABLE hardware_handovers (
    id                INTEGER PRIMARY KEY,
    asset_id          INTEGER NOT NULL REFERENCES hardware_assets (id),
    staff_id          INTEGER NOT NULL REFERENCES staff_members (id),
    kind              TEXT NOT NULL CHECK (kind IN ('loan', 'replacement')),
    reason            TEXT NOT NULL CHECK (reason IN ('travel', 'temporary_replacement', 'project', 'training',
                                                      'broken', 'lost', 'stolen', 'end_of_life')),
    replaces_asset_id INTEGER REFERENCES hardware_assets (id),
    handed_on         TEXT NOT NULL,
    due_on            TEXT,
    returned_on       TEXT
);

-- due_on is the SLA deadline: opened_on plus 0, 1, 3 or 7 days for P1 to P4.
CREATE TABLE it_tickets (
    id          INTEGER PRIMARY KEY,
    staff_id    INTEGER NOT NULL REFERENCES staff_members (id),
    category    TEXT NOT NULL CHECK (category IN ('hardware', 'software', 'network', 'access', 'account', 'security', 'other')),
    priority    TEXT NOT NULL CHECK (priority IN ('P1', 'P2', 'P3', 'P4')),
    status      TEXT NOT NULL CHECK (status IN ('new', 'in_progress', 'waiting_on_staff', 'resolved', 'closed')),
    subject     TEXT NOT NULL,
    description TEXT NOT NULL,
    asset_id    INTEGER REFERENCES hardware_assets (id),
    opened_on   TEXT NOT NULL,
    due_on      TEXT NOT NULL,
    updated_on  TEXT NOT NULL,
    resolved_on TEXT
);

-- Weekly on-call rota: one engineer per team and week (Monday to Sunday).
CREATE TABLE oncall_shifts (
    id          INTEGER PRIMARY KEY,
    team        TEXT NOT NULL CHECK (team IN ('infrastructure', 'security', 'applications')),
    engineer_id INTEGER NOT NULL REFERENCES staff_members (id),
    starts_on   TEXT NOT NULL,
    ends_on     TEXT NOT NULL
);

-- A page of the engineer on call (the shift says which team and who) about a P1 ticket.
CREATE TABLE oncall_pages (
    id        INTEGER PRIMARY KEY,
    ticket_id INTEGER NOT NULL REFERENCES it_tickets (id),
    shift_id  INTEGER NOT NULL REFERENCES oncall_shifts (id),
    message   TEXT NOT NULL,
    paged_on  TEXT NOT NULL
);

-- The desk's record of what it did or refused for a staff member (and the ticket, if any).
CREATE TABLE service_desk_notes (
    id         INTEGER PRIMARY KEY,
    staff_id   INTEGER NOT NULL REFERENCES staff_members (id),
    ticket_id  INTEGER REFERENCES it_tickets (id),
    body       TEXT NOT NULL,
    created_on TEXT NOT NULL
);
