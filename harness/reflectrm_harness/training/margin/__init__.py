"""The margin recipe: what gave the default judge (``service/reflectrm/artifacts/default``) its
margin weights, no training of the model's own weights.

In order: ``counterfactuals`` (``reflectrm train counterfactuals``) builds pairs with a known
better reply from a pairs file (no model); ``features`` (``reflectrm train margin-features``)
reads margin mode's two features of every pair on a real engine (the verdict digits' log-odds in
both orders, each response's mean token log-prob); ``fit`` (``reflectrm train margin-fit``) fits
the two weights on them and writes the chosen fit into the judge's manifest.
"""
