"""Which words label a field: its own name, title and description, plus the
usual synonyms of common document fields in the common European languages.

A field is matched to *concepts* (invoice number, document date, total…) by
the words of its name, title and description; a concept brings labels (with a
weight: how surely the label announces this field), qualifier words that
disqualify a label ("Sub total", "Total HT", "Due date" are not the total or
the invoice date), the kind of value it expects and which occurrence wins
when several labels tie (the last total of a receipt, the first date).

All matching is on `fold`-ed text (lower case, no accents). Pure data and
pure functions; each field's labels are indexed once per process.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

from daemon.extraction.providers.rules.values import ValueKind, fold


@dataclass(frozen=True)
class Concept:
    name: str
    # Phrases in a field's name/title/description that mean this concept.
    triggers: tuple[str, ...]
    # label -> weight; the strongest labels first.
    labels: dict[str, float]
    # A label is refused when its cell also holds one of these words.
    negatives: frozenset[str] = frozenset()
    # Words that cancel the negatives ("Total incl. VAT" is a total).
    positives: frozenset[str] = frozenset()
    kind: ValueKind = ValueKind.TEXT
    last: bool = False  # among equal candidates, the last in the document wins
    # Phrases in a trigger-matching field that rule this concept out ("due date" is not "date").
    excluded_by: tuple[str, ...] = ()


def word_set(text: str) -> frozenset[str]:
    """Words written as one space-separated string (easier to read and extend than a list)."""
    return frozenset(text.split())


def _labels(strong: str, medium: str = "", weak: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    for text, weight in ((strong, 1.0), (medium, 0.85), (weak, 0.6)):
        for label in text.split("|"):
            label = label.strip()
            if label and label not in out:
                out[label] = weight
    return out


_TAX_WORDS = word_set("tax taxes vat tva btw mwst ust iva gst sst hst pst igst cgst sgst tps tvq moms alv dph "
                      "ppn")
_EXCLUSIVE = word_set(
    "ht sub subtotal excl excl. exclusive excluding exclusief exkl exkl. zonder ohne hors netto nett0 "
    "before untaxed pre-tax pretax netto-betrag"
)

CONCEPTS: tuple[Concept, ...] = (
    Concept(
        "invoice_number",
        triggers=("invoice number", "invoice no", "invoice id", "invoice #", "invoice_number", "invoice num",
                  "receipt number", "receipt no", "bill number", "bill no", "document number", "reference",
                  "invoice ref", "factuurnummer", "rechnungsnummer", "numero de facture", "numer faktury"),
        labels=_labels(
            "invoice number|invoice no|invoice nr|invoice num|invoice #|invoice id|invoice ref|inv no|inv #|"
            "tax invoice no|tax invoice number|bill no|bill number|receipt no|receipt number|receipt #|"
            "facture n°|facture no|facture n|facture numero|n° de facture|no de facture|numero de facture|"
            "n° facture|rechnungsnr|rechnungsnummer|rechnung nr|rechnungs-nr|factuurnummer|factuurnr|"
            "factuur nr|faktura nr|faktura vat nr|numer faktury|nr faktury|numero de factura|factura n°|"
            "factura no|n° factura|fattura n|numero fattura|nota fiscal|documento n°",
            "invoice|factuur|facture|rechnung|faktura|factura|fattura|document no|document number|doc no|"
            "document #|bill #|cash bill no|receipt|reference no|reference number|ref no|belegnummer|beleg nr|"
            "numero|nummer|#",
            "reference|ref|booking id|booking no|booking reference|order id|order no|order number|"
            "transaction id|trans no|ticket no|no",
        ),
        negatives=_TAX_WORDS | word_set(
            "date datum data fecha date: due account customer client kunden klant id-nr ust-id phone tel fax "
            "order po purchase iban swift bic page seite pagina total amount montant bedrag betrag kvk siret "
            "siren contract period to from address"
        ),
        kind=ValueKind.ID,
    ),
    Concept(
        "due_date",
        triggers=("due date", "payment due", "due by", "pay by", "vervaldatum", "fälligkeit", "date limite",
                  "echeance", "expiry", "deadline"),
        labels=_labels(
            "due date|payment due|date due|due by|pay by|payment date|vervaldatum|vervaldag|falligkeitsdatum|"
            "fallig am|zahlbar bis|zahlungsziel|date limite de paiement|date d'echeance|echeance|"
            "fecha de vencimiento|vencimiento|termin platnosci|scadenza",
            "due",
        ),
        kind=ValueKind.DATE,
    ),
    Concept(
        "date",
        triggers=("invoice date", "date", "issued", "issue date", "purchase date", "document date", "datum",
                  "receipt date", "billing date", "transaction date"),
        excluded_by=("due", "delivery", "order date", "ship", "birth", "expir", "start", "end date",
                     "payment date", "period"),
        labels=_labels(
            "invoice date|date of invoice|date of issue|issue date|issued on|date issued|bill date|billing date|"
            "receipt date|document date|tax invoice date|invoice dt|rechnungsdatum|factuurdatum|factuur datum|"
            "date de facture|date facture|date de facturation|date d'emission|data wystawienia|"
            "data faktury|fecha de factura|fecha de emision|data fattura|data emissione|belegdatum|"
            "date",
            "datum|dated|data|fecha|tarikh|issued|trans date|transaction date|sale date|purchase date|"
            "date/time|date & time|date time",
            "du|le|on",
        ),
        negatives=word_set(
            "due limite echeance vervaldatum vervaldag fallig falligkeit zahlungsziel delivery livraison "
            "lieferdatum leverdatum ship shipping order orderdatum bestelldatum commande check-in check-out "
            "check in out arrival departure expiry expiration valid birth start end from to period payment "
            "paiement betaling prelevement reglement print printed sepa mandate"
        ),
        kind=ValueKind.DATE,
    ),
    Concept(
        "subtotal",
        triggers=("subtotal", "sub total", "net amount", "amount before tax", "untaxed", "excluding tax",
                  "excl", "net total", "total ht", "netto"),
        labels=_labels(
            "subtotal|sub total|sub-total|total excl vat|total excl. vat|total excluding tax|net amount|"
            "total ht|montant ht|total hors taxes|nettobetrag|netto|summe netto|subtotaal|totaal excl btw|"
            "exclusief btw|razem netto|wartosc netto|base imponible|imponibile",
            "net|untaxed amount|amount before tax",
        ),
        kind=ValueKind.AMOUNT,
        last=True,
    ),
    Concept(
        "tax",
        triggers=("tax", "vat", "gst", "tva", "btw", "mwst", "sales tax", "tax amount", "iva"),
        excluded_by=("tax included", "incl", "rate", "id", "number", "percent", "%"),
        labels=_labels(
            "tax|vat|tva|btw|mwst|ust|gst|sst|sales tax|tax amount|vat amount|total tax|total vat|"
            "montant tva|btw bedrag|umsatzsteuer|mehrwertsteuer|kwota vat|iva",
        ),
        negatives=word_set("id no number nr reg registration rate % incl excl base tin"),
        kind=ValueKind.AMOUNT,
        last=True,
    ),
    Concept(
        "total",
        triggers=("total", "amount due", "grand total", "balance due", "amount paid", "total amount",
                  "amount payable", "sum", "montant", "betrag", "bedrag", "amount"),
        excluded_by=("subtotal", "sub total", "tax amount", "vat amount", "before tax", "excluding",
                     "untaxed", "discount", "unit", "line", "per item", "paid amount of tax"),
        labels=_labels(
            "grand total|total due|total amount due|amount due|balance due|total amount|total to pay|"
            "total payable|amount payable|total incl|total inc|total including|total ttc|montant ttc|"
            "net a payer|somme a payer|montant a payer|total a payer|totaal|te betalen|totaalbedrag|"
            "factuur totaal|factuurtotaal|totaal incl|gesamtbetrag|gesamtsumme|endbetrag|rechnungsbetrag|"
            "zu zahlen|zahlbetrag|summe|naleznosc ogolem|naleznosc|do zaplaty|razem do zaplaty|"
            "importe total|total a pagar|totale|totale fattura|importo totale|nett total|net total|"
            "total rounded|rounded total|total (rm)|total sales|total bill|total invoice|invoice total|"
            "total facture|total",
            "amount|total eur|total usd|razem|suma|betrag|bedrag|montant|importe|total paid|amount paid|"
            "paid|balance|net amount due",
            "due",
        ),
        negatives=_TAX_WORDS | _EXCLUSIVE | word_set(
            "qty quantity quantities items item article articles pieces pcs count savings saving discount "
            "discounts rabatt korting remise descuento change rounding adj adjustment tip deposit weight "
            "points point units unit price per hours pages before previous credit credits number no invoices"
        ),
        positives=word_set("incl incl. inclusive including inc inkl inkl. inclus inclusief incluido ttc brutto gross "
                           "with"),
        kind=ValueKind.AMOUNT,
        last=True,
    ),
    Concept(
        "currency",
        triggers=("currency", "devise", "wahrung", "valuta", "waluta", "moneda", "iso 4217"),
        labels=_labels("currency|devise|wahrung|valuta|waluta|moneda"),
        kind=ValueKind.CURRENCY,
    ),
    Concept(
        "vendor",
        triggers=("company", "vendor", "seller", "supplier", "merchant", "shop", "store", "issuer", "issued by",
                  "sold by", "business", "restaurant", "from", "biller", "provider"),
        excluded_by=("customer", "buyer", "bill to", "ship to", "recipient", "client", "address", "email",
                     "phone", "vat", "tax id", "number", "registration"),
        labels=_labels(
            "vendor|seller|supplier|merchant|sold by|issued by|company name|business name|"
            "sprzedawca|verkaufer|lieferant|fournisseur|vendeur|leverancier|verkoper|proveedor|fornitore",
            "company",
            "store|shop|from",
        ),
        negatives=word_set("address adresse no number id vat tax phone tel email reg registration co roc gst "
                           "ssm"),
        kind=ValueKind.PARTY,
    ),
    Concept(
        "customer",
        triggers=("customer", "buyer", "client", "bill to", "billed to", "recipient", "purchaser", "sold to"),
        excluded_by=("address", "email", "phone", "number", "id"),
        labels=_labels(
            "bill to|billed to|sold to|invoice to|customer|client|buyer|recipient|nabywca|kunde|klant|"
            "acheteur|destinataire|cliente|customer name|guest name",
        ),
        negatives=word_set("no number id nr vat tax"),
        kind=ValueKind.PARTY,
    ),
    Concept(
        "address",
        triggers=("address", "adresse", "adres", "anschrift", "direccion", "indirizzo", "location"),
        excluded_by=("email", "e-mail", "ip address", "web"),
        labels=_labels(
            "address|adresse|adres|anschrift|direccion|indirizzo|endereco|alamat|location",
        ),
        negatives=word_set("email e-mail mail web ip"),
        kind=ValueKind.ADDRESS,
    ),
    Concept(
        "email",
        triggers=("email", "e-mail", "mail"),
        labels=_labels("email|e-mail|mail|courriel"),
        kind=ValueKind.EMAIL,
    ),
    Concept(
        "phone",
        triggers=("phone", "telephone", "tel", "mobile", "fax"),
        labels=_labels("phone|telephone|tel|mobile|telefon|telefoon|telefono|tel no|phone no|contact no"),
        kind=ValueKind.PHONE,
    ),
    Concept(
        "order_number",
        triggers=("order number", "order no", "order id", "po number", "purchase order", "po"),
        labels=_labels("order number|order no|order id|order #|po number|po no|p.o. number|purchase order|"
                       "ordernummer|bestellnummer|numero de commande|commande n°|ordernr", "po|order"),
        negatives=word_set("date datum"),
        kind=ValueKind.ID,
    ),
    Concept(
        "iban",
        triggers=("iban", "bank account"),
        labels=_labels("iban|bank account|account number|kto-nr|rekeningnummer"),
        kind=ValueKind.ID,
    ),
)

# What a receipt says was handed over and given back: tendered - change = total.
PAYMENT_CONCEPTS: dict[str, Concept] = {
    "tendered": Concept(
        "tendered", triggers=(),
        labels=_labels("cash|cash tendered|tendered|amount tendered|cash received|amount received|received|"
                       "tunai|payment|paid|amount paid|visa|mastercard|master|card|credit card|debit card|"
                       "espece|especes|bar|contant|gotowka|efectivo"),
        negatives=word_set("bill change no number refund"),
        kind=ValueKind.AMOUNT,
    ),
    "change": Concept(
        "change", triggers=(),
        labels=_labels("change|change due|cash change|kembalian|baki|rendu|monnaie rendue|wisselgeld|"
                       "ruckgeld|reszta|cambio|vuelto|resto"),
        negatives=word_set("exchange exchangeable"),
        kind=ValueKind.AMOUNT,
        last=True,
    ),
}


def concept_labels(concept: Concept) -> FieldLabels:
    return FieldLabels(labels=dict(concept.labels), index=LabelIndex(concept.labels),
                       negatives=concept.negatives, positives=concept.positives, kind=concept.kind,
                       last=concept.last, concept=concept.name, concepts=(concept.name,))


# Columns of a table (arrays of objects), found in header rows.
COLUMN_CONCEPTS: tuple[Concept, ...] = (
    Concept(
        "description",
        triggers=("description", "item", "name", "product", "article", "service", "designation", "title",
                  "details", "particulars"),
        excluded_by=("code", "number", "sku", "id"),
        labels=_labels(
            "description|item description|product description|item|items|product|products|article|artikel|"
            "service|services|designation|libelle|omschrijving|beschreibung|bezeichnung|artikelbezeichnung|"
            "leistung|nazwa|nazwa towaru|descripcion|descrizione|particulars|details|name|product title|"
            "produkt|prestation|code/desc",
        ),
        kind=ValueKind.TEXT,
    ),
    Concept(
        "quantity",
        triggers=("quantity", "qty", "count", "units", "menge", "aantal", "quantite", "ilosc"),
        labels=_labels("quantity|qty|qty.|quantite|qte|menge|anzahl|aantal|ilosc|cantidad|quantita|units|"
                       "nombre|hoeveelheid|pcs|count|no. of units", "unit|hours|hrs"),
        kind=ValueKind.AMOUNT,
    ),
    Concept(
        "unit_price",
        triggers=("unit price", "price", "rate", "unit cost", "unit_price", "prix unitaire", "einzelpreis"),
        excluded_by=("total", "amount"),
        labels=_labels(
            "unit price|price|rate|unit cost|price per unit|prix unitaire|p.u.|pu|p.u. ht|prix|einzelpreis|"
            "preis|e-preis|stuckpreis|prijs|prijs per stuk|cena|cena jedn|precio|precio unitario|prezzo|"
            "vk-preis|unit rate|each",
        ),
        kind=ValueKind.AMOUNT,
    ),
    Concept(
        "amount",
        triggers=("amount", "total", "line total", "line amount", "subtotal", "sum", "montant", "betrag",
                  "bedrag", "price total"),
        labels=_labels(
            "amount|total|line total|line amount|total price|ext price|extended|montant|montant ht|"
            "montant ttc|betrag|gesamt|gesamtpreis|zeilenbetrag|bedrag|totaal|prijs incl. btw|wartosc|"
            "wartosc brutto|importe|importo|sum|value|net amount|amount (rm)|amt",
        ),
        kind=ValueKind.AMOUNT,
    ),
    Concept(
        "tax_rate",
        triggers=("tax rate", "vat rate", "tax %", "vat %", "tax", "vat", "btw", "tva"),
        labels=_labels("tax rate|vat rate|tax|vat|tva|btw|mwst|vat %|tax %|tax(%)|% tva|% btw|iva|gst"),
        kind=ValueKind.AMOUNT,
    ),
    Concept(
        "code",
        triggers=("sku", "code", "item code", "product code", "article number", "part number", "ref"),
        labels=_labels("sku|code|item code|product code|article no|art. no|art.-nr|artikelnummer|artikelnr|"
                       "ref|reference|part no|part number|item no|item #|pos", "no|#"),
        kind=ValueKind.ID,
    ),
    Concept(
        "unit",
        triggers=("unit of measure", "uom", "unit"),
        excluded_by=("price", "cost", "rate"),
        labels=_labels("unit|uom|jm|einheit|unite|eenheid"),
        kind=ValueKind.TEXT,
    ),
)


@dataclass(frozen=True)
class FieldLabels:
    """Everything the engine needs to look for one field."""

    labels: dict[str, float]
    index: LabelIndex
    negatives: frozenset[str] = frozenset()
    positives: frozenset[str] = frozenset()
    kind: ValueKind = ValueKind.TEXT
    last: bool = False
    concept: str | None = None
    concepts: tuple[str, ...] = field(default=())


def _words_of(name: str) -> str:
    """``invoiceNumber`` / ``invoice_number`` / ``invoice-number`` → ``invoice number``."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name)
    return " ".join(re.split(r"[\s_\-.]+", fold(spaced))).strip()


def _phrase_hits(text: str, phrase: str) -> bool:
    return re.search(r"(?<![a-z0-9])" + re.escape(phrase) + r"(?![a-z0-9])", text) is not None


def concepts_for(name: str, spec: dict[str, Any], concepts: tuple[Concept, ...] = CONCEPTS) -> list[Concept]:
    """The concepts a field means, best first: its name decides before its description."""
    own = _words_of(name)
    title = fold(str(spec.get("title") or ""))
    description = fold(str(spec.get("description") or ""))
    scored: list[tuple[int, int, Concept]] = []
    for order, concept in enumerate(concepts):
        everything = " ".join((own, title, description))
        if any(_phrase_hits(own + " " + title, phrase) for phrase in concept.excluded_by):
            continue
        if _phrase_hits(own, concept.name.replace("_", " ")) or any(_phrase_hits(own, t) for t in concept.triggers):
            scored.append((0, order, concept))
        elif any(_phrase_hits(title, t) for t in concept.triggers):
            scored.append((1, order, concept))
        elif any(_phrase_hits(description, t) for t in concept.triggers) and not any(
            _phrase_hits(everything, phrase) for phrase in concept.excluded_by
        ):
            scored.append((2, order, concept))
    scored.sort(key=lambda item: (item[0], item[1]))
    return [concept for _, _, concept in scored]


def _description_labels(description: str) -> list[str]:
    # "Invoice number or reference" → "invoice number", "reference": short chunks only.
    out = []
    for chunk in re.split(r"[,;:()/]|\bor\b|\bou\b|\boder\b|\bof\b|\be\.g\.|\bi\.e\.", fold(description)):
        words = chunk.split()
        if 1 <= len(words) <= 3:
            out.append(" ".join(words))
    return out


# Words of labels and of page text alike: runs of letters and digits, and the
# signs that stand for a word ("#", "n°", "%").
TOKEN = re.compile(r"\w+|[#°№%&@]")
# What may separate the words of a label in the text ("Invoice-No.:", "Total (RM)").
_SEPARATOR = re.compile(r"[ \t.:_\-()/']*")

Token = tuple[int, int, str]  # start, end, folded text


def tokens(folded: str) -> tuple[Token, ...]:
    return tuple((m.start(), m.end(), m.group()) for m in TOKEN.finditer(folded))


class LabelIndex:
    """Labels as word sequences, indexed by their first word: finding every
    label of a field in a line costs a dictionary lookup per word of the line,
    however many labels the field has."""

    def __init__(self, labels: dict[str, Any]) -> None:
        # first word -> [(words, label, value)], longest first
        self.by_first: dict[str, list[tuple[tuple[str, ...], str, Any]]] = {}
        for label, value in labels.items():
            words = tuple(t for _, _, t in tokens(label))
            if words:
                self.by_first.setdefault(words[0], []).append((words, label, value))
        for entries in self.by_first.values():
            entries.sort(key=lambda entry: -len(entry[0]))
        self._deletions: dict[str, list[tuple[tuple[str, ...], str, Any]]] | None = None

    def find(self, folded: str, toks: tuple[Token, ...], accept: Any = None,
             fuzzy: bool = False) -> list[tuple[int, int, str, Any, bool]]:
        """Non-overlapping label matches in a line as (start, end, label, value,
        exact), longest first at each word; `accept(start, end, value)` may
        refuse one (then a shorter label at the same word is tried).

        With `fuzzy` (text read by OCR), a word of five letters or more also
        matches with one letter missing, added or wrong ("Tota", "Tptal");
        such a match is not `exact`.
        """
        out: list[tuple[int, int, str, Any, bool]] = []
        index, count = 0, len(toks)
        by_first = self.by_first
        while index < count:
            token = toks[index][2]
            entries = by_first.get(token, [])
            if fuzzy and len(token) >= 4:
                entries = entries + self._near(token)
            matched = 0
            for words, label, value in entries:
                n = len(words)
                if index + n > count:
                    continue
                exact = words[0] == token
                ok = True
                for k in range(1, n):
                    word = toks[index + k][2]
                    if word != words[k]:
                        if not (fuzzy and one_edit(word, words[k])):
                            ok = False
                            break
                        exact = False
                    if not _SEPARATOR.fullmatch(folded, toks[index + k - 1][1], toks[index + k][0]):
                        ok = False
                        break
                if not ok:
                    continue
                start, end = toks[index][0], toks[index + n - 1][1]
                if accept is not None and not accept(start, end, value):
                    continue
                out.append((start, end, label, value, exact))
                matched = n
                break
            index += matched or 1
        return out

    def _near(self, token: str) -> list[tuple[tuple[str, ...], str, Any]]:
        if self._deletions is None:
            self._deletions = {}
            for first, entries in self.by_first.items():
                if len(first) >= 5:
                    for variant in _deletions(first):
                        self._deletions.setdefault(variant, []).extend(entries)
        near: list[tuple[tuple[str, ...], str, Any]] = []
        near += self._deletions.get(token, [])  # a letter lost
        for variant in _deletions(token):
            near += self.by_first.get(variant, [])  # a letter added
            near += self._deletions.get(variant, [])  # a letter misread
        seen: set[int] = set()
        unique = []
        for entry in near:
            if id(entry) not in seen and len(entry[0][0]) >= 5 and entry[0][0] != token:
                seen.add(id(entry))
                unique.append(entry)
        unique.sort(key=lambda entry: -len(entry[0]))
        return unique


def _deletions(word: str) -> set[str]:
    return {word[:i] + word[i + 1 :] for i in range(len(word))}


def one_edit(a: str, b: str) -> bool:
    """Whether two words of five letters or more differ by one letter at most."""
    if min(len(a), len(b)) < 4 or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        return sum(x != y for x, y in zip(a, b, strict=True)) <= 1
    short, long = (a, b) if len(a) < len(b) else (b, a)
    return short in _deletions(long)


@functools.lru_cache(maxsize=512)
def _field_labels(name: str, title: str, description: str, columns: bool) -> FieldLabels:
    spec = {"title": title, "description": description}
    found = concepts_for(name, spec, COLUMN_CONCEPTS if columns else CONCEPTS)
    labels: dict[str, float] = {}
    own = _words_of(name)
    if own:
        labels[own] = 1.0
    if title:
        labels[fold(title).strip(" :")] = 1.0
    concept = found[0] if found else None
    if concept is not None:
        for label, weight in concept.labels.items():
            labels.setdefault(label, weight)
    for label in _description_labels(description):
        labels.setdefault(label, 0.7 if concept is None else 0.5)
    for label in list(labels):
        if len(label) < 2 and label != "#":
            del labels[label]
    return FieldLabels(
        labels=labels,
        index=LabelIndex(labels),
        negatives=concept.negatives if concept else frozenset(),
        positives=concept.positives if concept else frozenset(),
        kind=concept.kind if concept else ValueKind.TEXT,
        last=concept.last if concept else False,
        concept=concept.name if concept else None,
        concepts=tuple(c.name for c in found),
    )


def field_labels(name: str, spec: dict[str, Any], *, column: bool = False) -> FieldLabels:
    """Labels, qualifiers and value kind for the field `name` described by `spec`."""
    return _field_labels(name, str(spec.get("title") or ""), str(spec.get("description") or ""), column)
