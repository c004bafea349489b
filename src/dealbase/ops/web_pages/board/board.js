// @ts-check
/**
 * The pipeline board: one department's steps as columns and its deals as cards, kept live by
 * the `pipelineBoard` subscription (over graphql-sse: transport.js). Dragging a card to another
 * column calls `moveDeal`. Each card shows the tenant's custom fields of deals the user chose
 * (fields.js). Text from the server is only ever set as `textContent`.
 */

import { CardFields } from "./fields.js";
import { Refused, graphql, subscribe } from "./transport.js";

const STORED_KEY = "dealbase.board.key";
const STORED_DEPARTMENT = "dealbase.board.department";
// The subscription's estimated cost grows with the cards per step; 20 keeps it (41,178) within the
// default budget (DEALBASE_GRAPHQL_MAX_COST). A column says how many more it holds.
const CARDS_PER_STEP = 20;
const DEAL_TYPE = "application/x-dealbase-deal";
const RETRY_FIRST_MS = 1000;
const RETRY_MAX_MS = 10000;

const DEPARTMENTS = "query Departments { departments { id name } }";
// Every card's custom fields, whichever are chosen: choosing others shows them at once, from
// the board already here.
const BOARD = `subscription Board($departmentId: UUID!) {
  pipelineBoard(departmentId: $departmentId) {
    cursor
    steps {
      step { id name kind }
      dealCount
      totalVolume
      deals(first: ${CARDS_PER_STEP}) {
        id name volume employeeName version customFields
        customers { firstName lastName company }
      }
    }
  }
}`;
const MOVE = `mutation Move($id: UUID!, $stepId: UUID!) {
  moveDeal(id: $id, stepId: $stepId) { id stepId version }
}`;

/** @typedef {import("./transport.js").Credentials} Credentials */
/** @typedef {{ id: string, name: string }} Department */
/** @typedef {{ firstName: string | null, lastName: string, company: string | null }} Customer */
/**
 * @typedef {{ id: string, name: string, volume: number | null, employeeName: string | null,
 *   version: number, customFields: Record<string, unknown> | null, customers: Customer[] }} Deal
 */
/**
 * @typedef {{ step: { id: string, name: string, kind: string }, dealCount: number,
 *   totalVolume: number, deals: Deal[] }} Column
 */
/**
 * A move made here; ``version``: the deal's once the server has made it.
 * @typedef {{ dealId: string, stepId: string, version?: number }} Move
 */

/**
 * @template {HTMLElement} T
 * @param {string} id
 * @param {new () => T} type
 * @returns {T}
 */
function byId(id, type) {
  const found = document.getElementById(id);
  if (!(found instanceof type)) throw new Error(`#${id} is missing from the page`);
  return found;
}

const ui = {
  signIn: byId("sign-in", HTMLFormElement),
  key: byId("key", HTMLInputElement),
  department: byId("department", HTMLInputElement),
  pick: byId("pick-department", HTMLFormElement),
  departments: byId("departments", HTMLSelectElement),
  departmentName: byId("department-name", HTMLElement),
  status: byId("status", HTMLElement),
  forget: byId("forget", HTMLButtonElement),
  hint: byId("hint", HTMLElement),
  message: byId("message", HTMLElement),
  board: byId("board", HTMLElement),
};

const fields = new CardFields(
  byId("card-fields", HTMLDetailsElement),
  byId("card-field-choices", HTMLElement),
  () => current?.show(),
);

const volumes = new Intl.NumberFormat(undefined, { maximumFractionDigits: 0 });

/**
 * An element with its text (never parsed as HTML) and children.
 * @param {string} tag
 * @param {{ className?: string, text?: string }} [options]
 * @param {Node[]} [children]
 */
function element(tag, options = {}, children = []) {
  const made = document.createElement(tag);
  if (options.className) made.className = options.className;
  if (options.text !== undefined) made.textContent = options.text;
  made.append(...children);
  return made;
}

/** @param {string | null} text */
function showMessage(text) {
  ui.message.textContent = text ?? "";
  ui.message.hidden = text === null;
}

/** @param {string} text @param {"live" | "waiting" | "stopped"} state */
function showStatus(text, state) {
  ui.status.textContent = text;
  ui.status.className = state;
}

/** @returns {Credentials | null} */
function storedCredentials() {
  const key = sessionStorage.getItem(STORED_KEY);
  return key ? { key, department: sessionStorage.getItem(STORED_DEPARTMENT) } : null;
}

/** @param {Credentials} credentials */
function store(credentials) {
  sessionStorage.setItem(STORED_KEY, credentials.key);
  if (credentials.department) sessionStorage.setItem(STORED_DEPARTMENT, credentials.department);
  else sessionStorage.removeItem(STORED_DEPARTMENT);
}

/** @param {number} ms */
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** The board being shown: its credentials, its department, and the stream that feeds it. */
class Session {
  /** @param {Credentials} credentials @param {Department} department */
  constructor(credentials, department) {
    this.credentials = credentials;
    this.department = department;
    this.stopped = false;
    this.controller = new AbortController();
    /** The board as the server last sent it. @type {Column[]} */
    this.sent = [];
    /** The moves made here that no board from the server shows yet. @type {Move[]} */
    this.pending = [];
    /** The board as shown: the server's with the pending moves made on it. */
    this.shown = this.sent;
    /** The moves sent, one after another: sent at once, they could arrive out of order. */
    this.sending = Promise.resolve();
  }

  stop() {
    this.stopped = true;
    this.controller.abort();
  }

  /** Follows the board until stopped or refused, reconnecting after any other end. */
  async follow() {
    let wait = RETRY_FIRST_MS;
    while (!this.stopped) {
      this.controller = new AbortController();
      showStatus("Connecting…", "waiting");
      try {
        const ended = await subscribe(
          this.credentials,
          BOARD,
          { departmentId: this.department.id },
          this.controller.signal,
          (data) => {
            wait = RETRY_FIRST_MS;
            showStatus("Live", "live");
            this.sent = data.pipelineBoard.steps;
            this.show();
            fields.notice(this.credentials, this.sent);
          },
        );
        if (ended === "complete") {
          showStatus("Closed by the server", "stopped");
          return;
        }
      } catch (error) {
        if (this.stopped) return;
        if (error instanceof Refused) {
          showStatus("Stopped", "stopped");
          showMessage(error.message);
          return;
        }
      } finally {
        this.controller.abort();
      }
      if (this.stopped) return;
      // The network, a server restart, a slow-consumer close: the board comes back whole on the
      // next subscription, so nothing needs resuming.
      showStatus("Reconnecting…", "waiting");
      await sleep(wait);
      wait = Math.min(wait * 2, RETRY_MAX_MS);
    }
  }

  /** Shows the server's board with the pending moves made on it: a board the server sent
   * before it ran them does not put their cards back, even when it arrives after the server
   * answered them. A move is done once a board shows its deal at the version it made. */
  show() {
    this.pending = this.pending.filter((move) => !shownBy(this.sent, move));
    this.shown = this.pending.reduce(
      (columns, move) => movedLocally(columns, move.dealId, move.stepId) ?? columns,
      this.sent,
    );
    render(this, this.shown);
  }

  /**
   * Shows the card in its new column at once, then asks the server to move it; the
   * subscription brings the board as the server has it.
   * @param {string} dealId
   * @param {string} stepId
   */
  async move(dealId, stepId) {
    // From the board as shown: a card moved twice in a row moves from where it was shown.
    if (movedLocally(this.shown, dealId, stepId) === null) return;
    const move = { dealId, stepId };
    this.pending.push(move);
    this.show();
    const sent = this.sending.then(() => graphql(this.credentials, MOVE, { id: dealId, stepId }));
    this.sending = sent.catch(() => undefined);
    try {
      move.version = (await sent).moveDeal.version;
      showMessage(null);
    } catch (error) {
      showMessage(`The deal was not moved: ${error instanceof Error ? error.message : error}`);
      this.pending = this.pending.filter((each) => each !== move);
      this.show();
    }
  }
}

/**
 * Whether a board from the server shows the move made: the server has answered it, and the
 * board has its deal at that version or later, or not at all (nothing there to correct).
 * @param {Column[]} columns
 * @param {Move} move
 */
function shownBy(columns, move) {
  if (move.version === undefined) return false;
  for (const column of columns) {
    const deal = column.deals.find((each) => each.id === move.dealId);
    if (deal) return deal.version >= move.version;
  }
  return true;
}

/**
 * The columns with the deal moved to the step, or null when it is there already.
 * @param {Column[]} columns
 * @param {string} dealId
 * @param {string} stepId
 * @returns {Column[] | null}
 */
function movedLocally(columns, dealId, stepId) {
  const from = columns.find((column) => column.deals.some((deal) => deal.id === dealId));
  const to = columns.find((column) => column.step.id === stepId);
  if (!from || !to || from === to) return null;
  const deal = /** @type {Deal} */ (from.deals.find((each) => each.id === dealId));
  const volume = deal.volume ?? 0;
  return columns.map((column) => {
    if (column === from) {
      return {
        ...column,
        dealCount: column.dealCount - 1,
        totalVolume: column.totalVolume - volume,
        deals: column.deals.filter((each) => each !== deal),
      };
    }
    if (column === to) {
      return {
        ...column,
        dealCount: column.dealCount + 1,
        totalVolume: column.totalVolume + volume,
        deals: [...column.deals, deal],
      };
    }
    return column;
  });
}

/** @param {number} count */
const dealsText = (count) => `${count} ${count === 1 ? "deal" : "deals"}`;

/** @param {Customer} customer */
function customerText(customer) {
  const name = [customer.firstName, customer.lastName].filter(Boolean).join(" ");
  return customer.company ? `${name} (${customer.company})` : name;
}

/**
 * @param {Session} session
 * @param {Deal} deal
 * @param {Column | undefined} previous the step before the card's, if any
 * @param {Column | undefined} next the step after it, if any
 */
function card(session, deal, previous, next) {
  const shown = fields.shownOf(deal.customFields);
  const made = element("li", { className: "card" }, [
    element("h3", { text: deal.name }),
    element("p", {
      className: "volume",
      text: deal.volume === null ? "No volume" : volumes.format(deal.volume),
    }),
    element("p", {
      className: deal.employeeName ? "employee" : "employee unassigned",
      text: deal.employeeName ?? "Unassigned",
    }),
    ...(shown ? [shown] : []),
    element(
      "ul",
      { className: "customers" },
      deal.customers.map((customer) => element("li", { text: customerText(customer) })),
    ),
  ]);
  made.draggable = true;
  made.dataset.dealId = deal.id;
  made.addEventListener("dragstart", (event) => {
    event.dataTransfer?.setData(DEAL_TYPE, deal.id);
    if (event.dataTransfer) event.dataTransfer.effectAllowed = "move";
    made.classList.add("dragging");
  });
  made.addEventListener("dragend", () => made.classList.remove("dragging"));
  // Dragging needs a pointer: a focused card moves a step with the arrow keys too.
  made.tabIndex = 0;
  made.setAttribute("aria-keyshortcuts", "ArrowLeft ArrowRight");
  made.addEventListener("keydown", (event) => {
    const to = { ArrowLeft: previous, ArrowRight: next }[event.key];
    if (!to) return;
    event.preventDefault();
    void session.move(deal.id, to.step.id);
  });
  return made;
}

/** @param {Session} session @param {Column[]} columns @param {number} index */
function columnOf(session, columns, index) {
  const column = columns[index];
  const cards = element(
    "ol",
    { className: "cards" },
    column.deals.map((deal) => card(session, deal, columns[index - 1], columns[index + 1])),
  );
  const hidden = column.dealCount - column.deals.length;
  if (hidden > 0) cards.append(element("li", { className: "more", text: `and ${hidden} more` }));
  const made = element("section", { className: `column ${column.step.kind.toLowerCase()}` }, [
    element("header", {}, [
      element("h2", { text: column.step.name }),
      element("p", {
        className: "summary",
        text: `${dealsText(column.dealCount)} · ${volumes.format(column.totalVolume)}`,
      }),
    ]),
    cards,
  ]);
  made.setAttribute("aria-label", column.step.name);
  made.dataset.stepId = column.step.id;
  made.addEventListener("dragover", (event) => {
    if (!event.dataTransfer?.types.includes(DEAL_TYPE)) return;
    event.preventDefault(); // allows the drop
    event.dataTransfer.dropEffect = "move";
    made.classList.add("target");
  });
  made.addEventListener("dragleave", (event) => {
    if (!(event.relatedTarget instanceof Node && made.contains(event.relatedTarget))) {
      made.classList.remove("target");
    }
  });
  made.addEventListener("drop", (event) => {
    event.preventDefault();
    made.classList.remove("target");
    const dealId = event.dataTransfer?.getData(DEAL_TYPE);
    if (dealId) void session.move(dealId, column.step.id);
  });
  return made;
}

/** @param {Session} session @param {Column[]} columns */
function render(session, columns) {
  if (session !== current) return; // a stream the user has left since
  const focused = document.activeElement;
  const dealId = focused instanceof HTMLElement ? focused.dataset.dealId : undefined;
  ui.board.replaceChildren(...columns.map((_, index) => columnOf(session, columns, index)));
  // The focused card keeps the focus, wherever the new board has it.
  if (dealId) {
    const again = ui.board.querySelector(`[data-deal-id="${CSS.escape(dealId)}"]`);
    if (again instanceof HTMLElement) again.focus();
  }
}

/** @type {Session | null} */
let current = null;

function leave() {
  current?.stop();
  current = null;
  ui.board.replaceChildren();
  ui.board.hidden = true;
  ui.hint.hidden = true;
  ui.pick.hidden = true;
  ui.forget.hidden = true;
  ui.departmentName.textContent = "";
  fields.clear();
  showStatus("", "stopped");
}

/** @param {string | null} why */
function signInAgain(why) {
  leave();
  sessionStorage.removeItem(STORED_KEY);
  sessionStorage.removeItem(STORED_DEPARTMENT);
  fields.forget();
  ui.signIn.hidden = false;
  showMessage(why);
  ui.key.focus();
}

/** @param {Credentials} credentials @param {Department} department */
function showBoard(credentials, department) {
  leave();
  store({ ...credentials, department: department.id });
  ui.signIn.hidden = true;
  ui.board.hidden = false;
  ui.hint.hidden = false;
  ui.forget.hidden = false;
  ui.departmentName.textContent = department.name;
  showMessage(null);
  current = new Session({ ...credentials, department: department.id }, department);
  void current.follow();
  void fields.read(current.credentials);
}

/**
 * Checks the key, then shows its department's board, or asks which department (a tenant-wide
 * key sees them all).
 * @param {Credentials} credentials
 */
async function open(credentials) {
  showMessage(null);
  showStatus("Checking the key…", "waiting");
  /** @type {Department[]} */
  let departments;
  try {
    departments = (await graphql(credentials, DEPARTMENTS)).departments;
  } catch (error) {
    const why = error instanceof Refused ? error.message : "The server could not be reached.";
    signInAgain(why);
    return;
  }
  store(credentials);
  const named = departments.find((department) => department.id === credentials.department);
  if (named) {
    showBoard(credentials, named);
  } else if (departments.length === 1 && !credentials.department) {
    showBoard(credentials, departments[0]);
  } else if (departments.length === 0) {
    signInAgain("This key's tenant has no department yet: there is no board to show.");
  } else {
    leave();
    ui.signIn.hidden = true;
    ui.forget.hidden = false;
    ui.departments.replaceChildren(
      ...departments.map((department) => {
        const option = element("option", { text: department.name });
        option.setAttribute("value", department.id);
        return option;
      }),
    );
    ui.pick.hidden = false;
    showMessage(
      credentials.department
        ? "This key sees no department with that id. Choose one of its departments."
        : "This key is tenant-wide: choose the department whose board to show.",
    );
    ui.departments.focus();
  }
}

ui.signIn.addEventListener("submit", (event) => {
  event.preventDefault();
  const credentials = { key: ui.key.value.trim(), department: ui.department.value.trim() || null };
  // The key lives in session storage from here on, not in the form.
  ui.key.value = "";
  void open(credentials);
});

ui.pick.addEventListener("submit", (event) => {
  event.preventDefault();
  const stored = storedCredentials();
  const option = ui.departments.selectedOptions[0];
  if (!stored || !option) return;
  showBoard(stored, { id: option.value, name: option.textContent ?? "" });
});

ui.forget.addEventListener("click", () => signInAgain(null));

const stored = storedCredentials();
if (stored) void open(stored);
else ui.signIn.hidden = false;
