"""The offline, deterministic `rules` provider (`engine.extract_rules`).

Each module imports only those above it in this list:

- values: typed values in a piece of text (`find_*`), `ValueKind`;
- labels: which words label a field (concepts, synonyms, qualifiers);
- layout: the document indexed for label search (lines, cells, offsets);
- fields: `FieldQuery`, what to look for in one field, and each kind's reader;
- candidates: a value found with its score, the choice among them, the JSON value;
- label_reader: values read beside and below their labels;
- totals, parties, tables: a receipt's total, the issuer's name and
  address, line items;
- voting: one result from several OCR readings;
- engine: the definition walked, each field found or fallen back on;
- locate: evidence for values another provider chose.
"""
