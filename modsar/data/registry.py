"""Standard benchmark datasets: where they come from and how they are usually prepared.

Checksums are SHA-256 of the uncompressed file (or, for a zip, of the archive) so a download is verified
before anything is imported. Versions follow the files the literature uses; see `description`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from modsar.errors import ModsarError

S3REC = (
    "https://raw.githubusercontent.com/RUCAIBox/CIKM2020-S3Rec/2a81540ae18615d88ef88227b0c066e5b74781e5/data/"
)
SASREC = "https://raw.githubusercontent.com/kang205/SASRec/e3738967fddab206d6eeb4fda433e7a7034dd8b1/data/"


# the history window (items a model reads) a dataset is prepared with unless its entry or --max-len says
# otherwise; a run's data.max_len=0 reads the dataset's own (modsar.data.store.window)
DEFAULT_MAX_LEN = 50


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    description: str
    format: str
    max_len: int = DEFAULT_MAX_LEN
    min_user_count: int = 0
    min_item_count: int = 0
    kcore: bool = False
    dedup_consecutive: bool = False
    min_rating: float | None = None
    url: str | None = None
    sha256: str | None = None  # of the downloaded file (a zip: of the archive)
    md5: str | None = None  # where only an MD5 is published (GroupLens)
    member: str | None = None  # file inside a zip archive
    expected: dict[str, int] = field(default_factory=dict)  # users/items/interactions after preparation

    def options(self) -> dict:
        return {
            "min_user_count": self.min_user_count,
            "min_item_count": self.min_item_count,
            "kcore": self.kcore,
            "dedup_consecutive": self.dedup_consecutive,
            "min_rating": self.min_rating,
        }


_S3REC_NOTE = "S3Rec 5-core version (one user per line), as used by S3Rec, CL4SRec, DuoRec, FMLP-Rec"

REGISTRY: dict[str, DatasetSpec] = {
    spec.name: spec
    for spec in [
        DatasetSpec(
            "beauty",
            f"Amazon Beauty, {_S3REC_NOTE}",
            "user-lines",
            50,
            5,
            5,
            url=S3REC + "Beauty.txt",
            sha256="226cce9c3105299ca0db9615d7d3fb32b3175e90da43100ae352599f0f0107b8",
            expected={"users": 22363, "items": 12101, "interactions": 198502},
        ),
        DatasetSpec(
            "sports",
            f"Amazon Sports and Outdoors, {_S3REC_NOTE}",
            "user-lines",
            50,
            5,
            5,
            url=S3REC + "Sports_and_Outdoors.txt",
            sha256="2a095e0648872beb9982408958290f5d655db5be2911c3756b5446de9f0b8de2",
            expected={"users": 35598, "items": 18357, "interactions": 296337},
        ),
        DatasetSpec(
            "toys",
            f"Amazon Toys and Games, {_S3REC_NOTE}",
            "user-lines",
            50,
            5,
            5,
            url=S3REC + "Toys_and_Games.txt",
            sha256="176c680c688d497598c4a89a03b402c0fe78d795e5db335c2e78dd5f2d778a3f",
            expected={"users": 19412, "items": 11924, "interactions": 167597},
        ),
        DatasetSpec(
            "yelp",
            f"Yelp, {_S3REC_NOTE}",
            "user-lines",
            50,
            5,
            5,
            url=S3REC + "Yelp.txt",
            sha256="724b219106b81dd2349027da997334ddb6da9fe2f152ad6e0d97a93170f7caed",
            expected={"users": 30431, "items": 20033, "interactions": 316354},
        ),
        DatasetSpec(
            "lastfm",
            f"LastFM (HetRec 2011), {_S3REC_NOTE}",
            "user-lines",
            50,
            5,
            5,
            url=S3REC + "LastFM.txt",
            sha256="9ded486adb5b0fe9dc761950afa0a9a05e93ff018992e0c52bf11afec529f802",
            expected={"users": 1090, "items": 3646, "interactions": 52551},
        ),
        DatasetSpec(
            "video",
            "Amazon Video Games, SASRec version (user item pairs; the ModSAR paper's Video)",
            "pairs",
            50,
            url=SASREC + "Video.txt",
            sha256="b7376fe24430743f411dc7f567285657b2adb3f74361cc7ba0aee94f3024b651",
            expected={"users": 31013, "items": 23715, "interactions": 287107},
        ),
        DatasetSpec(
            "steam",
            "Steam, SASRec version (user item pairs); no published checksum",
            "pairs",
            50,
            url=SASREC + "Steam.txt",
        ),
        DatasetSpec(
            "ml-1m",
            "MovieLens-1M, all ratings, items with >= 5 ratings (BERT4Rec/ModSAR version)",
            "ml-dat",
            200,
            5,
            5,
            url="https://files.grouplens.org/datasets/movielens/ml-1m.zip",
            md5="c4d9eecfca2ab87c1945afe126590906",
            member="ml-1m/ratings.dat",
            expected={"users": 6040, "items": 3416},
        ),
        DatasetSpec(
            "ml-100k",
            "MovieLens-100K, RecBole atomic file, all ratings",
            "inter",
            50,
            url="https://raw.githubusercontent.com/RUCAIBox/RecBole/7b02be5ec80a88310f2d04a27a82adfcbb5dc211"
            "/dataset/ml-100k/ml-100k.inter",
            sha256="4edb74e2a81178c2ba9ff381495f754f996c4aea351b1272ca36b43da0935eff",
            expected={"users": 943, "items": 1682, "interactions": 100000},
        ),
        DatasetSpec(
            "diginetica",
            "Diginetica sessions (SR-GNN preprocessing); pass the train and the test "
            "session files as two --source options (no text download exists)",
            "sessions",
            50,
            expected={"users": 202633, "items": 43097, "interactions": 982961},
        ),
    ]
}

SYNTHETIC = "synthetic"
SYNTHETIC_CLUSTERS = "synthetic-clusters"

# Built-in generated datasets (modsar.data.synthetic): prepared on first use, no source file, and their
# manifest records the generator's options and the Bayes-optimal metrics of the planted structure.
SYNTHETIC_SPECS: dict[str, DatasetSpec] = {
    spec.name: spec
    for spec in [
        DatasetSpec(
            SYNTHETIC,
            "built-in generator: first-order Markov chain over items (order matters); known optimum",
            "synthetic",
            30,
        ),
        DatasetSpec(
            SYNTHETIC_CLUSTERS,
            "built-in generator: latent user clusters, order-free; known optimum",
            "synthetic",
            30,
        ),
    ]
}
REGISTRY.update(SYNTHETIC_SPECS)


def is_generated(name: str) -> bool:
    return name in SYNTHETIC_SPECS


def get_spec(name: str) -> DatasetSpec | None:
    return REGISTRY.get(name)


def require_spec(name: str) -> DatasetSpec:
    spec = REGISTRY.get(name)
    if spec is None:
        raise ModsarError(f"unknown benchmark '{name}'; known: {', '.join(sorted(REGISTRY))}")
    return spec
