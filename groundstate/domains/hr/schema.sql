-- Brightwater Systems people-operations world. Portable SQL: runs unchanged on SQLite and PostgreSQL 15.
-- Money is REAL rounded to cents by the tools, leave is REAL days, flags are INTEGER 0/1, dates are
-- ISO 'YYYY-MM-DD' TEXT. Tables are listed in foreign-key order.

CREATE TABLE hr_departments (
    id          INTEGER PRIMARY KEY,
    code        TEXT NOT NULL UNIQUE,
    name        TEXT NOT NULL UNIQUE,
    cost_center TEXT NOT NULL
);

-- Pay grades: a salary must stay within its grade's band.
CREATE TABLE salary_bands (
    id         INTEGER PRIMARY KEY,
    grade      TEXT NOT NULL UNIQUE,
    title      TEXT NOT NULL,
    min_salary REAL NOT NULL CHECK (min_salary > 0),
    max_salary REAL NOT NULL,
    CHECK (max_salary > min_salary)
);

-- Employees. manager_id is the direct manager (NULL for department heads); managers always have
-- smaller ids than their reports, so rows insert in id order.
CREATE TABLE personnel (
    id               INTEGER PRIMARY KEY,
    employee_no      TEXT NOT NULL UNIQUE,
    first_name       TEXT NOT NULL,
    last_name        TEXT NOT NULL,
    work_email       TEXT NOT NULL UNIQUE,
    department_id    INTEGER NOT NULL REFERENCES hr_departments (id),
    manager_id       INTEGER REFERENCES personnel (id),
    job_title        TEXT NOT NULL,
    band_id          INTEGER NOT NULL REFERENCES salary_bands (id),
    salary           REAL NOT NULL CHECK (salary > 0),
    employment_type  TEXT NOT NULL CHECK (employment_type IN ('full_time', 'part_time')),
    status           TEXT NOT NULL CHECK (status IN ('onboarding', 'active', 'terminated')),
    hire_date        TEXT NOT NULL,
    termination_date TEXT,
    ssn_last4        TEXT NOT NULL CHECK (LENGTH(ssn_last4) = 4)
);

-- One row per employee, leave type and calendar year. accrued_days is credited by payroll on the
-- first of each month; used_days counts approved leave (taken or booked).
CREATE TABLE leave_balances (
    id                INTEGER PRIMARY KEY,
    personnel_id      INTEGER NOT NULL REFERENCES personnel (id),
    leave_type        TEXT NOT NULL CHECK (leave_type IN ('annual', 'sick')),
    year              INTEGER NOT NULL,
    entitlement_days  REAL NOT NULL CHECK (entitlement_days >= 0),
    carried_over_days REAL NOT NULL CHECK (carried_over_days >= 0),
    accrued_days      REAL NOT NULL CHECK (accrued_days >= 0),
    used_days         REAL NOT NULL CHECK (used_days >= 0),
    UNIQUE (personnel_id, leave_type, year)
);

-- days = working days in [start_date, end_date] (weekends and company holidays excluded).
CREATE TABLE leave_requests (
    id           INTEGER PRIMARY KEY,
    personnel_id INTEGER NOT NULL REFERENCES personnel (id),
    leave_type   TEXT NOT NULL CHECK (leave_type IN ('annual', 'sick')),
    start_date   TEXT NOT NULL,
    end_date     TEXT NOT NULL,
    days         REAL NOT NULL CHECK (days > 0),
    status       TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'rejected', 'cancelled')),
    requested_on TEXT NOT NULL,
    decided_on   TEXT,
    decided_by   INTEGER REFERENCES personnel (id),
    cancelled_on TEXT,
    CHECK (end_date >= start_date)
);

-- Periods in which a department's staff may not take annual leave (quarter-end close, release freeze).
CREATE TABLE leave_blackouts (
    id            INTEGER PRIMARY KEY,
    department_id INTEGER NOT NULL REFERENCES hr_departments (id),
    label         TEXT NOT NULL,
    start_date    TEXT NOT NULL,
    end_date      TEXT NOT NULL,
    CHECK (end_date >= start_date)
);

-- A new hire's checklist; mandatory items can never be waived.
CREATE TABLE onboarding_items (
    id           INTEGER PRIMARY KEY,
    personnel_id INTEGER NOT NULL REFERENCES personnel (id),
    item         TEXT NOT NULL CHECK (item IN ('laptop_setup', 'badge_access', 'security_training', 'payroll_enrollment',
                                               'benefits_enrollment', 'policy_acknowledgement')),
    mandatory    INTEGER NOT NULL CHECK (mandatory IN (0, 1)),
    due_date     TEXT NOT NULL,
    status       TEXT NOT NULL CHECK (status IN ('pending', 'done', 'waived')),
    completed_on TEXT,
    completed_by INTEGER REFERENCES personnel (id),
    UNIQUE (personnel_id, item)
);

-- Pay changes: scheduled by the tools, applied to personnel.salary by payroll on effective_date.
CREATE TABLE salary_adjustments (
    id             INTEGER PRIMARY KEY,
    personnel_id   INTEGER NOT NULL REFERENCES personnel (id),
    requested_by   INTEGER NOT NULL REFERENCES personnel (id),
    old_salary     REAL NOT NULL CHECK (old_salary > 0),
    new_salary     REAL NOT NULL CHECK (new_salary > 0),
    reason         TEXT NOT NULL CHECK (reason IN ('merit', 'market_adjustment', 'retention', 'correction')),
    effective_date TEXT NOT NULL,
    status         TEXT NOT NULL CHECK (status IN ('scheduled', 'applied', 'cancelled')),
    recorded_on    TEXT NOT NULL
);

-- Where salary is paid; exactly one active account per employee, older ones kept as 'replaced'.
CREATE TABLE personnel_bank_accounts (
    id             INTEGER PRIMARY KEY,
    personnel_id   INTEGER NOT NULL REFERENCES personnel (id),
    bank_name      TEXT NOT NULL,
    routing_number TEXT NOT NULL CHECK (LENGTH(routing_number) = 9),
    account_number TEXT NOT NULL,
    status         TEXT NOT NULL CHECK (status IN ('active', 'replaced')),
    added_on       TEXT NOT NULL,
    replaced_on    TEXT
);

-- Reimbursements: submitted by the employee, decided by their manager, paid with the next payroll.
CREATE TABLE expense_claims (
    id           INTEGER PRIMARY KEY,
    personnel_id INTEGER NOT NULL REFERENCES personnel (id),
    category     TEXT NOT NULL CHECK (category IN ('travel', 'lodging', 'meals', 'equipment', 'training', 'other')),
    amount       REAL NOT NULL CHECK (amount > 0),
    incurred_on  TEXT NOT NULL,
    description  TEXT NOT NULL,
    status       TEXT NOT NULL CHECK (status IN ('submitted', 'approved', 'rejected', 'reimbursed')),
    submitted_on TEXT NOT NULL,
    decided_on   TEXT,
    decided_by   INTEGER REFERENCES personnel (id)
);

-- The HR desk's record of what it did or refused, on an employee's file.
CREATE TABLE hr_notes (
    id           INTEGER PRIMARY KEY,
    personnel_id INTEGER NOT NULL REFERENCES personnel (id),
    body         TEXT NOT NULL,
    created_on   TEXT NOT NULL
);

CREATE TABLE hr_escalations (
    id           INTEGER PRIMARY KEY,
    personnel_id INTEGER NOT NULL REFERENCES personnel (id),
    category     TEXT NOT NULL CHECK (category IN ('compensation_approval', 'expense_approval', 'policy_exception', 'security')),
    status       TEXT NOT NULL CHECK (status IN ('open', 'closed')),
    reason       TEXT NOT NULL,
    created_on   TEXT NOT NULL
);
