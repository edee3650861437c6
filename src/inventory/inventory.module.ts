import { Module } from '@nestjs/common';
import { InventoryService } from './inventory.service';
import { ProductCatalogService } from './product-catalog.service';
import { ProductsRepository } from './products.repository';
import { SoldOutBoardService } from './sold-out-board.service';
import { StockHintsService } from './stock-hints.service';
import { StockRepository } from './stock.repository';

@Module({
  providers: [
    InventoryService,
    ProductCatalogService,
    ProductsRepository,
    SoldOutBoardService,
    StockHintsService,
    StockRepository,
  ],
  exports: [InventoryService, ProductCatalogService, SoldOutBoardService, StockHintsService, StockRepository],
})
export class InventoryModule {}
